#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 6: the tree as submitted. Tensor parallelism
# through the backend (eager and compiled) against plain NCCL's losses, fast_worker's GPU paths
# (--quick), and moe.py's drop-less decode with more pairs. Packed into $OUT/all.tgz.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-330}
. lab/scripts/parts.sh
packed_call
for w in "tp mcr" "tp nccl" "tpc mcr"; do
  set -- $w
  run w_$1_$2 90 $R tests/workers/torch_backend_worker.py $1 $2 cuda
  grep -h "LOSSES\|COMPILED" $OUT/w_$1_$2.log | head -2 >> $OUT/summary.txt
done
run fast 150 $R tests/workers/fast_worker.py --quick
grep -h "OK\|FAIL\|Error" $OUT/fast.log | head -4 >> $OUT/summary.txt
export MCR_TUNING_TABLE=$PWD/tuning_tables/nvidia-h200_np2.yaml
run moe_uneven 120 $R -m benchmarks.moe --shape large --tokens 16,64 --k 2 --capacity uneven \
    --step decode --pairs 11 --out $OUT/moe
grep -h "x \[\|waited" $OUT/moe_uneven.log >> $OUT/summary.txt
cat $OUT/summary.txt
