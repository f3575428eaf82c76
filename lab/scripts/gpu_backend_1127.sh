#!/usr/bin/env bash
# 2026-11-27 (fourth session): the mcr torch.distributed backend on 4x H200, one process per
# probe with mcr, NCCL and no communication alternated inside it: HF tp_plan decode captured
# in CUDA graphs and eager (lab/probes/hf_tp_graph.py, with the profiler's collective kernels);
# DDP and FSDP2 training steps (lab/probes/ddp_fsdp_backend.py).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi -L | tee -a $OUT/summary.txt
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
run() { local name=$1 lim=$2; shift 2; local t0=$(date +%s); timeout $lim "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
run ddp_fsdp 150 $R lab/probes/ddp_fsdp_backend.py --rounds 7
CK=/tmp/hf8b
[ -d $CK ] || run hf_graph 120 python3 lab/probes/hf_tp_graph.py make $CK 8
run hf_graph 240 $R lab/probes/hf_tp_graph.py $CK --batches 1,16 --rounds 9 --reps 30
grep -h "RESULT\|destroyed\|Thread\|File" $OUT/hf_graph.log $OUT/ddp_fsdp.log | cut -c1-4000 > $OUT/digest.txt
cat $OUT/summary.txt
