#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 5: as call 4 (gpu_fsdp2_1128.sh), with DDP's
# futures chained from torch's NCCL work (no Python stream switch) and more rounds: DDP's
# losses on mcr against plain NCCL, DDP and FSDP2 through the backend against a plain group.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
for what in ddp; do
  for be in mcr nccl; do
    run w_${what}_$be 90 $R tests/workers/torch_backend_worker.py $what $be cuda
  done
  grep -h "loss\|LOSS" $OUT/w_${what}_mcr.log | head -3 >> $OUT/summary.txt
  grep -h "loss\|LOSS" $OUT/w_${what}_nccl.log | head -3 >> $OUT/summary.txt
done
run fsdp 200 $R lab/probes/ddp_fsdp_backend.py --what fsdp,ddp --rounds 13 --mcr-nccl --passthru
grep -h "RESULT" $OUT/fsdp.log | cut -c1-1500 >> $OUT/summary.txt
cat $OUT/summary.txt
