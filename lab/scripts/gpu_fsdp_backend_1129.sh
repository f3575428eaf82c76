#!/usr/bin/env bash
# 1x H200, 2026-11-29 (second session), call 1: FSDP2 on the mcr backend now calls mcr's comm
# objects directly (d0670a1). One GPU: every one-GPU test (-m gpu), the backend worker's FSDP2
# on CUDA on one rank (mcr against plain NCCL: losses, which comm objects served), and the
# FSDP2 probe on one rank (the symmetric ring's path on a GPU; its ratios mean nothing at one
# rank). Predictions: 14 passed, 9 skipped; losses equal bit for bit, COMMS mcr's on mcr and
# torch's defaults on NCCL; the probe completes with losses equal.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for be in mcr nccl; do
  run w_fsdp_$be 90 $R tests/workers/torch_backend_worker.py fsdp $be cuda
  grep -h "LOSSES\|COMMS\|Error" $OUT/w_fsdp_$be.log | cut -c1-300 | head -4 >> $OUT/summary.txt
done
run fsdp 120 env PYTHONPATH=$PYTHONPATH:$PWD/lab/probes $R lab/probes/ddp_fsdp_backend.py \
    --what fsdp --rounds 3 --layers 4 --passthru
grep -h "RESULT\|Error" $OUT/fsdp.log | cut -c1-700 >> $OUT/summary.txt
grep -h -A8 "^op " $OUT/fsdp.log | head -10 >> $OUT/summary.txt
run gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/
tail -15 $OUT/gpu_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
