#!/usr/bin/env bash
# 2026-12-07 (second session), 1x GPU, after gpu_ddp_host_1207.sh showed DDP's loss on the
# mcr backend at a host-bound shape is torch's Python-group layer (pass: 0.89x, ~90 us a
# bucket) plus mcr's own path (~60 us more: inside allreduce 96 vs 66 us, OnStream's wrapper
# and future ~30).
# 1. call_pieces: host us of one async all-reduce through each layer (main thread), cProfile.
#    Prediction: cpp 15-25 us; tdist +8-12; mcr cpp+10-20; mcrpg (torch's Work handed on)
#    mcr+3-5; mcrpg_tdist mcrpg+15-25.
# 2. ddp_host_cost with mcr (torch's Work handed on) against mcr_os (OnStream as before):
#    mcr ~0.25 ms a step faster than mcr_os (passos - pass last call): ~0.89x of NCCL.
# 3. The backend's GPU test (DDP, FSDP2, TP bit for bit against NCCL at one rank).
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run pieces512 40 $R lab/probes/call_pieces.py --bytes 512 --out $OUT/CPROF
run pieces1m 40 $R lab/probes/call_pieces.py --bytes 1048576 --out $OUT/CPROF
run ddp_host 110 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 9
run gpu_test 150 python3 -m pytest -q -m gpu tests/test_torch_backend.py -x
grep -h "RESULT" $OUT/pieces*.log $OUT/ddp_host.log | cut -c1-1500 >> $OUT/summary.txt
tail -3 $OUT/gpu_test.log >> $OUT/summary.txt
