#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 4): `mcr-tune check` of the shipped 2x table
# (issue 51: median <= 2%, worst <= 8% per op at off-grid sizes). The third session's check of
# the same table: medians 0%, worst 1.7% but symmetric broadcast 8 MiB (NCCL chosen) 41% by
# medians / 3.5% at best. Prediction: medians 0%, worst under 8% everywhere but maybe that point
# again (if it repeats, the table's NCCL choice at 8 MiB symmetric broadcast is wrong).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
run check 180 python3 -m tuner check tuning_tables/nvidia-h200_np2.yaml -d cuda -t bfloat16 \
    -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
grep -h "^# re-measured\|^# op" -A16 $OUT/check.log | grep -v "mcr-tune check:" >> $OUT/summary.txt
cat $OUT/summary.txt
