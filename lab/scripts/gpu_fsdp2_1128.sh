#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 4: the backend's GPU all-gathers and
# reduce-scatters now hand back work under way (NCCL on its own stream, a stream wait), as the
# minimal pass-through group of call 3 did: FSDP2 and DDP through the backend again, and the
# torch_backend worker's losses (fsdp, ddp) on mcr against plain NCCL. WORKERS, ROUNDS and
# PROFILE (empty: none) vary it (gpu_fsdp3_1128.sh).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
for what in ${WORKERS-fsdp ddp}; do
  for be in mcr nccl; do
    run w_${what}_$be 90 $R tests/workers/torch_backend_worker.py $what $be cuda
  done
  grep -h "loss\|LOSS" $OUT/w_${what}_mcr.log | head -3 >> $OUT/summary.txt
  grep -h "loss\|LOSS" $OUT/w_${what}_nccl.log | head -3 >> $OUT/summary.txt
done
run fsdp 200 $R lab/probes/ddp_fsdp_backend.py --what fsdp,ddp --rounds ${ROUNDS:-9} --mcr-nccl \
    --passthru ${PROFILE-"--profile $OUT/prof"}
grep -h "RESULT" $OUT/fsdp.log | cut -c1-1500 >> $OUT/summary.txt
cat $OUT/summary.txt
