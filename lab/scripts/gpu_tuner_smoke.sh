#!/usr/bin/env bash
# The tuner's CUDA paths on whatever GPUs the lease has (one is enough): symmetric outputs, the
# overlap profile (a GEMM beside each call), async calls, check and show. A smoke run of code the
# CPU machines cannot reach; its numbers at 1 rank say nothing about speed. Logs go to $OUT.
set -uo pipefail
. lab/scripts/gpu_env.sh
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
T0=$SECONDS
$MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m 4KiB:64MiB --batch 5 -i 20 -x 3 \
  --backend nccl,sdma --symm sdma --profiles standalone,overlap --out "$OUT/smoke_np$N" \
  > "$OUT/tune.log" 2>&1; echo "tune rc=$? in $((SECONDS - T0)) s"; grep -v "size/s" "$OUT/tune.log" | tail -8
python3 -m mcr.tuner show "$OUT/smoke_np$N.yaml" | head -40
$MPI python3 -m mcr.tuner check "$OUT/smoke_np$N.yaml" -d cuda -t bfloat16 -m 4KiB:16MiB \
  --backend nccl,sdma > "$OUT/check.log" 2>&1; echo "check rc=$?"; tail -8 "$OUT/check.log"
$MPI python3 -m benchmarks.osu_allgather -d cuda -t bfloat16 -m 4KiB:16MiB -f 16 -c \
  --backend auto,nccl,sdma --symm sdma --calls async --rounds 2 2>&1 | tail -6
