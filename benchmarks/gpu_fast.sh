#!/usr/bin/env bash
# GPU session for the fast paths (issue 3): correctness against NCCL, then OSU sweeps and the
# overlap benchmark, side by side with NCCL. Run from the repo root on the lent machine; logs go
# to $OUT (or ./gpu_out). PART=test|bench|all (default all).
set -uo pipefail
. benchmarks/gpu_env.sh
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
MPI2="mpirun --allow-run-as-root --oversubscribe -np 2 $X"
step() { local name=$1 limit=$2; shift 2; echo "== $name: $*"; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"
  grep -E "OK|Error|error|^#|^  |fast backends" "$OUT/$name.log" | grep -v "return func\|deprecat\|Warn\|_new_process" | tail -"${TAILN:-8}"; }
PART=${PART:-all}
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
if [ "$PART" != bench ]; then
step fast_x$N 360 $MPI python3 tests/workers/fast_worker.py --big 1GiB
MCR_SDMA_MAX_BYTES=1MiB MCR_BACKEND=sdma step fast_x2_chunked 200 \
  $MPI2 -x MCR_SDMA_MAX_BYTES -x MCR_BACKEND python3 tests/workers/fast_worker.py --quick
fi
if [ "$PART" != test ]; then
TAILN=12 step probe_kernel 90 $MPI python3 benchmarks/probe_ce.py
MCR_SDMA_SYNC=memops TAILN=12 step probe_memops 90 $MPI -x MCR_SDMA_SYNC python3 benchmarks/probe_ce.py
B="-d cuda -t bfloat16 -c --csv $OUT/osu.csv"
TAILN=30 step osu_allgather 240 $MPI python3 -m benchmarks.osu_allgather $B -m 64KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.6 --backend nccl,sdma
TAILN=30 step osu_allgather_symm 240 $MPI python3 -m benchmarks.osu_allgather $B -m 64KiB:1GiB -f 4 -i 20 -x 3 --batch 5 --max-seconds 0.6 --backend nccl,sdma --symm sdma
TAILN=30 step osu_allreduce 120 $MPI python3 -m benchmarks.osu_allreduce $B -m 256:1MiB -f 4 -i 300 -x 30 --batch 20 --max-seconds 0.3 --backend nccl,symm
TAILN=12 step overlap 240 $MPI python3 -m benchmarks.overlap --backend nccl,sdma,sdma+symm --reps 5 --csv $OUT/overlap.csv
TAILN=20 step osu_reducescatter 120 $MPI python3 -m benchmarks.osu_reducescatter $B -m 1MiB:256MiB -f 16 -i 20 -x 3 --batch 5 --max-seconds 0.3 --backend nccl,sdma
TAILN=20 step osu_alltoall 120 $MPI python3 -m benchmarks.osu_alltoall $B -m 1MiB:256MiB -f 16 -i 20 -x 3 --batch 5 --max-seconds 0.3 --backend nccl,sdma
TAILN=20 step osu_bcast 120 $MPI python3 -m benchmarks.osu_bcast $B -m 1MiB:256MiB -f 16 -i 20 -x 3 --batch 5 --max-seconds 0.3 --backend nccl,sdma
fi
} 2>&1 | tee "$OUT/summary.log"
