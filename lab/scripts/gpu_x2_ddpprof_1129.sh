#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 7): where DDP on the mcr backend loses its 0.8%
# (call 6: 0.992x [0.990-0.999]): 9 rounds with the pass-through Python group beside it (torch's
# Python-backend cost alone), then cProfile and torch.profiler of one block of each copy.
# Prediction: mcr's copy spends 5-15 us more host time per bucket all-reduce than NCCL's (the
# Python group, OnStream's future); the pass-through group loses about as much.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
. lab/scripts/parts.sh
packed_call
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp 150 $R lab/probes/ddp_fsdp_backend.py --what ddp --rounds 9 --passthru \
    --cprofile $OUT/cprof --profile $OUT/prof
grep -h "RESULT" $OUT/ddp.log | cut -c1-700 >> $OUT/summary.txt
cat $OUT/summary.txt
