#!/usr/bin/env bash
# 2026-11-27: GPU check of the uneven all-to-all exchange, the `even` key field (sdma and
# nccl_ce decline uneven splits only), the per-group call count and the stall watch on GPUs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi -L | tee $OUT/gpus.txt
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
M="mpirun -n $N --oversubscribe --allow-run-as-root"
run() { local name=$1; shift; local t0=$(date +%s); timeout 120 "$@" > $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
run moe $R examples/moe.py
run tp $R examples/tensor_parallel.py
run api_gpu $M python3 tests/workers/api_worker.py --device cuda --backends nccl,mpi,auto \
    --dtypes float32,bfloat16,int64 --big 16MiB
run fast_sdma $M python3 tests/workers/fast_worker.py --quick --sdma sdma_pipe
run diff_gpu env MCR_TIMEOUT_S=60 $M python3 tests/workers/torch_diff_worker.py --device cuda \
    --backends nccl,mpi,sdma,symm,auto
run special_gpu $M python3 tests/workers/special_worker.py --device cuda \
    --backends nccl,mpi,sdma,symm,auto
run uneven_cpu $M python3 tests/workers/errors_worker.py uneven_splits
run new_vs_old_cpu $M python3 tests/workers/errors_worker.py new_vs_old
grep -h "OK\|EXPECTED\|Error" $OUT/*.log | cut -c1-300 | sort | uniq -c | sort -rn | head -40 > $OUT/digest.txt
cat $OUT/summary.txt
