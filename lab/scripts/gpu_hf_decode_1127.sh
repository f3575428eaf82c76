#!/usr/bin/env bash
# 2026-11-27: HF tp_plan decode (8B-like, 8 layers, bf16), plain NCCL against the mcr backend,
# one process each, alternated nccl mcr mcr nccl ... (5 pairs).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
CK=/tmp/hf8b
[ -d $CK ] || python3 lab/probes/hf_tp_decode.py make $CK 8 > $OUT/make.log 2>&1 || { tail $OUT/make.log; exit 1; }
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
i=0
for m in ${ORDER:-nccl mcr mcr nccl nccl mcr mcr nccl nccl mcr}; do
  i=$((i+1))
  timeout 100 $R lab/probes/hf_tp_decode.py $m $CK > $OUT/run_${i}_$m.log 2>&1
  echo "$i $m rc=$? $(grep -h RESULT $OUT/run_${i}_$m.log)" | tee -a $OUT/results.txt
done
grep -h "served by\|^all_\|^broad" $OUT/run_2_mcr.log > $OUT/served.txt
rm -f $OUT/run_[3-9]_*.log $OUT/run_10_*.log   # the first pair's logs come back
