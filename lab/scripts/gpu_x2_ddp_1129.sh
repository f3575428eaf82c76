#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 6): issue 53's "DDP and FSDP2 steps through the
# backend >= 1.00x": DDP on the mcr backend against plain NCCL, 21 rounds, then FSDP2 again
# (call 2: 0.981x [0.970-1.015]; third session 1.016x [0.921-1.047]).
# Predictions: DDP 0.99-1.02x (11-27: 1.00x); FSDP2 0.97-1.02x (host-bound, swings).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
for w in ddp fsdp; do
  run $w 130 $R lab/probes/ddp_fsdp_backend.py --what $w --rounds 21
  grep -h "RESULT" $OUT/$w.log | cut -c1-400 >> $OUT/summary.txt
done
cat $OUT/summary.txt
