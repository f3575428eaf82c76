#!/usr/bin/env bash
# 2026-12-07 (fourth session), 1x GPU: more pairs for the host-bound DDP comparison after the
# backend hands DDP NCCL's own Work (gpu_ddp_host2_1207.sh had 9 rounds, blocks swinging 30%).
# Prediction: mcr 0.90-0.93x of NCCL, mcr_os (the wrapped form) ~0.1 ms a step slower than
# mcr, pass (torch's Python-group layer alone) 0.94-0.96x; batch 4 the same gaps in ms.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run ddp_b1 90 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 1 --rounds 17
run ddp_b4 90 $R lab/probes/ddp_host_cost.py --hidden 1024 --layers 16 --batch 4 --rounds 13
for f in $OUT/ddp_b*.log; do grep -h RESULT $f | python3 -c "
import json,sys; d=json.loads(sys.stdin.read()[7:]); d.pop('blocks')
print('$(basename $f)', json.dumps(d))" >> $OUT/summary.txt; done
