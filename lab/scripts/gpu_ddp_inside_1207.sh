#!/usr/bin/env bash
# 2026-12-07 (fourth session), 1x GPU: what mcr's allreduce does on autograd's thread that costs
# 83 us against pass's 46 (call 3), when on the main thread the two paths differ by ~7 us
# (call_pieces: 22.4 against 15.7). cProfile inside each instrumented allreduce, on that thread.
# Prediction: no single function of mcr's over 5 us a call; the C++ allreduce (torch's and
# mcr's alike) most of each; if a function's own time is far above its main-thread cost, the
# thread waits for the GIL there.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-150}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp_inside 100 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 5 \
    --cprofile-inside $OUT/INSIDE
grep -h RESULT $OUT/ddp_inside.log | cut -c1-1200 >> $OUT/summary.txt
head -25 $OUT/INSIDE.mcr.txt >> $OUT/summary.txt
head -25 $OUT/INSIDE.pass.txt >> $OUT/summary.txt
