#!/usr/bin/env bash
# 2026-12-07 (second session), 1x GPU: where DDP on the `mcr` backend loses ~1.4 ms a step
# against NCCL at a host-bound shape (hidden 1024, 16 blocks, batch 1; 0.84-0.86x before).
# lab/probes/ddp_host_cost.py times, on autograd's thread, the host us inside the group's
# allreduce and get_future, against torch's Python-backend layer alone (pass) and mcr's
# OnStream over NCCL's own Work (passos).
# Prediction: inside allreduce pass ~10-15 us, passos +2-4, mcr +15-25 over pass; get_future
# mcr 3-10 us. pass within 0.97-1.00x of nccl; mcr 0.84-0.88x. If the per-call costs add to
# far less than the step gap (~9 calls a step), the profiler tables say where the rest goes.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-240}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp_host 150 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 \
    --rounds 9 --out $OUT/PROF
run ddp_host_b8 80 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 8 \
    --rounds 7
grep -h "RESULT" $OUT/ddp_host*.log | cut -c1-1500 >> $OUT/summary.txt
