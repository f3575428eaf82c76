#!/usr/bin/env bash
# One full GPU session for the spine (issue 2): correctness on NCCL + MPI, then OSU sweeps.
# Run on the lent machine from the repo root; logs go to $OUT (or ./gpu_out).
set -uo pipefail
. lab/scripts/gpu_env.sh
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
step() { local name=$1; shift; echo "== $name: $*"; local t0=$SECONDS
  timeout 420 "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"; grep -E "OK|FAIL|Error|rank 0|^#|^  " "$OUT/$name.log" | grep -v "return func\|deprecat" | tail -${TAILN:-6}; }
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N"
python3 -c 'import torch, mpi4py; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "mpi4py", mpi4py.__version__)'
step api_gpu $MPI python3 tests/workers/api_worker.py --device cuda --backends nccl,mpi,auto --big 16MiB
step random_gpu $MPI python3 tests/workers/random_worker.py --device cuda --backends nccl,mpi --ops 2000
[ "${QUICK:-0}" = 1 ] && exit 0
step api_cpu_on_gpu_host $MPI python3 tests/workers/api_worker.py --device cpu --backends gloo,mpi --big 1MiB --dtypes float32,int64,bfloat16
step errors_local $MPI python3 tests/workers/errors_worker.py local
TAILN=40 step osu_allreduce $MPI python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -m 1KiB:64MiB -f 4 -i 50 -c --backend auto,nccl,mpi
TAILN=40 step osu_allgather $MPI python3 -m benchmarks.osu_allgather -d cuda -t bfloat16 -m 1KiB:64MiB -f 4 -i 30 -x 3 -c --backend auto,nccl,mpi --max-seconds 1
TAILN=10 step dispatch_overhead python3 -m benchmarks.dispatch_overhead --rounds 100
TAILN=20 step dispatch_overhead_gpu $MPI python3 -m benchmarks.dispatch_overhead --rounds 50
} 2>&1 | tee "$OUT/summary.log"
