# Sourced by the lab's GPU scripts: run NAME LIMIT COMMAND... runs it under timeout, its output
# in $OUT/NAME.log, one line in $OUT/summary.txt; a part that would start within 20 s of
# DEADLINE (seconds after T0) is skipped and said so.
run() { local name=$1 lim=$2; shift 2; local t0 left; t0=$(date +%s); left=$(( DEADLINE - t0 + T0 ))
        if [ $left -lt 20 ]; then echo "$name skipped (deadline)" >> $OUT/summary.txt; return; fi
        [ $lim -gt $left ] && lim=$left
        timeout $lim "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
