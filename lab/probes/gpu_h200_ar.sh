#!/usr/bin/env bash
# Issue 18's all-reduce points on 2x H200 with the shipped table, after symm's low-latency
# kernel: symm's GPU tests, OSU all-reduce 4 B to 1 GiB tuned vs NCCL (gpu_tune.sh's osu step
# for all-reduce alone), then gpu_small_ar.sh (RUNS, default 2). Exits at once on other GPUs
# (the table and the issue's targets are the H200's). Logs under $OUT.
set -uo pipefail
. lab/scripts/gpu_env.sh
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case $name in *H200*) ;; *) echo "not H200: $name"; exit 0 ;; esac
W=$OUT/h200_ar; mkdir -p "$W"
echo "# $(date -Iseconds) $name x$N, tree ${COMMIT:-?}"
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
TAILN=3 step test 120 $MPI python3 tests/workers/fast_worker.py --symm-only
TAILN=30 step osu_allreduce 120 $MPI python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -c \
  --csv "$W/osu_allreduce.csv" -i 24 -x 2 --batch 5 --max-seconds 0.3 --rounds 3 -m 4:1GiB -f 4 \
  --backend nccl,auto
RUNS=${RUNS:-2} bash lab/scripts/gpu_small_ar.sh
