#!/usr/bin/env bash
# 2026-11-28, fifth session, call 5 (2x H200): call 4's tune resumed. Its partial CSV came back
# with the appended rows' columns out of order (the bug fixed in mcr.measure.sweep.append_csv);
# repaired locally, MPI's rows of the overlap all-to-all pass dropped (MPI left out of the
# candidates: 1.4 s a 1 GiB call beside a GEMM), carried in results/carry/tune.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p $OUT/tune
cp results/carry/tune/nvidia-h200_np2.partial.csv $OUT/tune/
run tune 380 python3 -m mcr.tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
    --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
    --interconnect NVLink --out $OUT/tune/nvidia-h200_np2
grep -h "replayed\|wrote\|Error" $OUT/tune.log | tail -4 >> $OUT/summary.txt
grep -A30 "all_to_all overlap" $OUT/tune/nvidia-h200_np2.yaml | head -34 >> $OUT/summary.txt
cat $OUT/summary.txt
