#!/usr/bin/env bash
# 2026-11-27 (fourth session): DDP through the mcr backend after its GPU all-reduces return
# work under way (a CUDA future): timing against a plain NCCL group in one process
# (lab/probes/ddp_fsdp_backend.py), and the DDP/TP workers' losses, plain NCCL vs mcr.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
run() { local name=$1 lim=$2; shift 2; local t0=$(date +%s); timeout $lim "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
run ddp_fsdp 150 $R lab/probes/ddp_fsdp_backend.py --rounds 7
for what in ddp tp; do
  for be in nccl mcr; do
    run worker_${what} 100 $R tests/workers/torch_backend_worker.py $what $be cuda
  done
done
for what in ddp tp; do
  echo "== $what: distinct loss lines over nccl and mcr runs, per rank" >> $OUT/summary.txt
  grep -ho "rank [0-9]*: LOSSES.*" $OUT/worker_${what}.log | sed 's/ \(nccl\|mcr\) \[/ [/' \
    | cut -c1-120 | sort | uniq -c >> $OUT/summary.txt
done
grep -h "RESULT" $OUT/ddp_fsdp.log | cut -c1-1500 >> $OUT/summary.txt
cat $OUT/summary.txt
