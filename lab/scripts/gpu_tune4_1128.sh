#!/usr/bin/env bash
# 4x GPUs, the 2026-11-28 third session, call 1: the 4-GPU table re-tuned with today's rules
# (symm's low-latency all-gather, reduce-scatter, broadcast and all-to-all are new since the
# shipped one) and checked off the grid; symm's results against NCCL's (buffers moving
# differently per rank); the low-latency kernel's block shapes and an empty kernel in a graph
# chain. Packed into $OUT/all.tgz; the table also lands in $OUT/w/tune/.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-590}
. lab/scripts/parts.sh
packed_call
mkdir -p $OUT/tune
run tune 350 python3 -m tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
    --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
    --interconnect NVLink --out $OUT/tune/nvidia-h200_np4 --fresh
python3 -m tuner show $OUT/tune/nvidia-h200_np4.yaml > $OUT/show.txt 2>&1
grep -A14 "all_reduce\b" $OUT/show.txt | head -20 >> $OUT/summary.txt
run check 100 python3 -m tuner check $OUT/tune/nvidia-h200_np4.yaml -d cuda -t bfloat16 \
    -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
grep -A12 "^# op " $OUT/check.log >> $OUT/summary.txt
export MCR_TUNING_TABLE=$OUT/tune/nvidia-h200_np4.yaml MCR_STALL_S=10
run symm_check 50 $R tests/workers/fast_worker.py --symm-only
grep -h "symm:\|FAIL\|Error\|checks\|waited" $OUT/symm_check.log | head -8 >> $OUT/summary.txt
PARTS=kernels run ll 75 $R -m lab.probes.probe_ll_variants
grep -h "^ \|GPU us" $OUT/ll.log >> $OUT/summary.txt
cat $OUT/summary.txt
