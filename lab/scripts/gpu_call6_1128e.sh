#!/usr/bin/env bash
# 2026-11-28, fifth session, call 6 (2x H200): the tree as submitted on GPUs. Every GPU path
# against NCCL (fast_worker --quick), special values on the GPU paths, decode 8B batch 1 in a
# graph and eager (symm's single graph lookup; logits against NCCL's).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-330}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
run quick 130 $R tests/workers/fast_worker.py --quick
run special_gpu 80 mpirun -n $N --oversubscribe python3 tests/workers/special_worker.py \
    --device cuda --backends nccl,sdma,symm,auto
run decode 100 $R -m benchmarks.decode --shape 8b --batch 1 --mode graph,eager --pairs 5 \
    --out $OUT/decode
grep -h "OK\|FAIL\|Error\|ms/token" $OUT/*.log | cut -c1-220 | sort | uniq -c | head -30 >> $OUT/summary.txt
cat $OUT/summary.txt
