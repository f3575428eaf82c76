#!/usr/bin/env bash
# 2x GPUs, call 4 of the 2026-11-28 session: the uneven all-to-all probe again after waits spin
# before yielding, and benchmarks/moe.py decode with uneven splits. Packed into $OUT/all.tgz.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
run uneven 40 $R lab/probes/uneven_gpu.py
grep -h "UNEVEN" $OUT/uneven.log >> $OUT/summary.txt
export MCR_TUNING_TABLE=$PWD/tuning_tables/nvidia-h200_np$N.yaml
run moe_uneven 170 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
    --capacity uneven --step decode --pairs 5 --out $OUT/moe
grep -h "x \[\|fallback" $OUT/moe_uneven.log >> $OUT/summary.txt
cat $OUT/summary.txt
