#!/usr/bin/env bash
# 2026-11-27 (third session): the cross-rank guard on a GPU host. Host cost of GPU calls before
# (eba8387, lab/tmp_old, not committed) and after, alternated; GPU correctness workers; the
# guard's warm-up divergences on CPU tensors; the changing-sizes job on a 16-core host.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi -L | tee $OUT/gpus.txt
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
M="mpirun -n $N --oversubscribe --allow-run-as-root"
run() { local name=$1; shift; local t0=$(date +%s); timeout 150 "$@" >> $OUT/$name.log 2>&1
        echo "$name rc=$? $(( $(date +%s) - t0 )) s" | tee -a $OUT/summary.txt; }
for v in old new new old; do
  if [ $v = old ]; then P=$PWD/lab/tmp_old; else P=$PWD; fi
  echo "== $v" >> $OUT/overhead_cuda.log
  run overhead_cuda env PYTHONPATH=$P $R -m benchmarks.dispatch_overhead -d cuda --rounds 100
done
export PYTHONPATH=$PWD
run api_gpu $M python3 tests/workers/api_worker.py --device cuda --backends nccl,mpi,auto \
    --dtypes float32,bfloat16,int64 --big 16MiB
run special_gpu $M python3 tests/workers/special_worker.py --device cuda \
    --backends nccl,mpi,sdma,symm,auto
for c in size root; do
  run warm_mpi env MCR_STALL_S=4 $M python3 tests/workers/errors_worker.py warm_${c}_mpi
  run warm_gloo env MCR_STALL_S=4 $R tests/workers/errors_worker.py warm_${c}_gloo
done
run changing $M python3 -m benchmarks.dispatch_overhead --changing 3000 --rounds 5
run changing_noguard env MCR_GUARD=0 $M python3 -m benchmarks.dispatch_overhead --changing 3000 --rounds 3
grep -h "OK\|EXPECTED\|Error" $OUT/*.log | cut -c1-200 | sort | uniq -c | sort -rn | head -40 > $OUT/digest.txt
cat $OUT/summary.txt
