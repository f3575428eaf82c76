#!/usr/bin/env bash
# 2026-11-27: the mcr torch.distributed backend on GPUs: DDP, FSDP2, TP, and a 2-D mesh where
# 4 GPUs are lent, plain NCCL against the mcr backend (losses printed exactly by each).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
for what in ddp fsdp tp calls; do
  for be in $([ $what = calls ] && echo mcr || echo nccl mcr); do
    timeout 120 $R tests/workers/torch_backend_worker.py $what $be cuda > $OUT/${what}_$be.log 2>&1
    echo "$what $be rc=$?"; grep -h "LOSSES" $OUT/${what}_$be.log | sort | head -2
  done
done 2>&1 | tee $OUT/summary.txt
grep -h "served by\|^all_\|^broad\|^reduce\|^scatter" $OUT/*_mcr.log > $OUT/served.txt
