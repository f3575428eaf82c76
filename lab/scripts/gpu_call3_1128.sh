#!/usr/bin/env bash
# 2x GPUs, call 3 of the 2026-11-28 session: uneven all-to-all host cost (torch vs mcr),
# benchmarks/moe.py decode with the re-tuned 2x H200 table (symm all-to-all; named by
# MCR_TUNING_TABLE so an H100 host uses it too), and benchmarks/decode.py 8B batch 1 (graph and
# eager). Files packed into $OUT/all.tgz at exit.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
run uneven 60 $R lab/probes/uneven_gpu.py
grep -h "UNEVEN" $OUT/uneven.log >> $OUT/summary.txt
export MCR_TUNING_TABLE=$PWD/tuning_tables/nvidia-h200_np$N.yaml
run moe_decode 130 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
    --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
grep -h "x \[\|fallback\|all_to_all  " $OUT/moe_decode.log >> $OUT/summary.txt
unset MCR_TUNING_TABLE
run decode 180 $R -m benchmarks.decode --shape 8b --batch 1 --mode graph,eager --pairs 7 --out $OUT/decode
grep -h "x \[" $OUT/decode.log >> $OUT/summary.txt
cat $OUT/summary.txt
