#!/usr/bin/env bash
# 2026-12-07 (fourth session), 1x GPU: are the host-bound DDP steps' swings and the step-level
# gaps (passos - pass 0.7 ms a step against 14 us x 8 buckets inside the calls) Python's cyclic
# collector? ddp_host_cost now reports each variant's time in gc during its rounds; a second
# run freezes the heap after the warm-up (gc.freeze()).
# Prediction: gc under 1 ms a variant over all its rounds (1 pass on CPU): not the cause;
# frozen, the same ratios within noise.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp_gc 90 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 15
run ddp_frozen 90 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 15 \
    --gc-freeze
for f in $OUT/ddp_gc.log $OUT/ddp_frozen.log; do grep -h RESULT $f | python3 -c "
import json,sys; d=json.loads(sys.stdin.read()[7:]); d.pop('blocks'); d.pop('host_ms')
print('$(basename $f)', json.dumps(d))" >> $OUT/summary.txt; done
