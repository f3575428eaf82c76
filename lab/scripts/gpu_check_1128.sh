#!/usr/bin/env bash
# 2026-11-28, fourth session, 2x H200: this session's changes on GPUs. Every GPU path against
# NCCL (fast_worker --quick); MPI on GPU tensors through the caller's-thread blocking form
# (api_worker, special values); new sizes across a table boundary; the torch backend under
# mpirun with no torch variables set by the script (DDP on GPUs, mcr against plain NCCL);
# the changing-sizes job on this host.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
M="mpirun -n $N --oversubscribe"
git log --oneline -1 >> $OUT/summary.txt 2>/dev/null
run quick 120 $R tests/workers/fast_worker.py --quick
run api_gpu 120 $M python3 tests/workers/api_worker.py --device cuda --backends nccl,mpi,auto \
    --dtypes float32,bfloat16,int64 --big 16MiB
run special_gpu 90 $M python3 tests/workers/special_worker.py --device cuda \
    --backends nccl,mpi,sdma,symm,auto
run new_sizes 60 env MCR_TUNING_TABLE=$PWD/tests/data/ar_boundary_cpu.yaml \
    CUDA_VISIBLE_DEVICES= $M python3 tests/workers/new_sizes_worker.py
for b in nccl mcr; do
  run ddp_$b 90 $M python3 tests/workers/torch_backend_worker.py ddp $b cuda
done
for s in 1 256; do
  run changing_$s 120 env CUDA_VISIBLE_DEVICES= $M python3 -m benchmarks.dispatch_overhead \
      --changing 1000 --step $s --rounds 7
done
grep -h "OK\|FAIL\|Error\|LOSSES\|served by\|/ MPI\|/ gloo" $OUT/*.log | cut -c1-220 \
    | sort | uniq -c | sort -rn | head -40 >> $OUT/summary.txt
