#!/usr/bin/env bash
# 2026-12-07, 1x H100: where a DDP step on the `mcr` backend loses 1-1.5 ms against NCCL at a
# host-bound shape (hidden 1024, 16 layers, batch 1: 0.84-0.86x in gpu_backend_1207.sh, old and
# new tree alike, while the bucket's host cost fell from +27-50 to +17-21 us).
# Prediction: mcr sent to NCCL as slow as mcr (the cost is the backend's Python path, not the
# library); cProfile's top own-time functions in mcr's path add up to <= 0.5 ms a step, the rest
# in torch's Python-backend layer (the reducer's hook into a Python group).
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp_prof 140 $R lab/probes/ddp_fsdp_backend.py --what ddp --hidden 1024 --layers 16 \
    --batch 1 --rounds 5 --steps 5 --mcr-nccl --cprofile $OUT/CPROFILE --profile $OUT/PROFILE
grep -h "RESULT" $OUT/ddp_prof.log | cut -c1-600 >> $OUT/summary.txt
