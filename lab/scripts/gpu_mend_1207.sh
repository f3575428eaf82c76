#!/usr/bin/env bash
# 2026-12-07 (fifth session), 1x GPU: the backend's single-tensor GPU allreduce now issues its
# calls through one list (same behaviour as 4baada9). Prediction: the backend's GPU test passes
# (DDP, FSDP2, TP bit for bit against NCCL); DDP probe mcr/nccl within last session's
# 0.886-0.933x (host-bound shape), pass beside it.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run gpu_test 200 python3 -m pytest -q -m gpu tests/test_torch_backend.py
tail -3 $OUT/gpu_test.log >> $OUT/summary.txt
run ddp 150 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 7
grep -h RESULT $OUT/ddp.log | cut -c1-1500 >> $OUT/summary.txt
