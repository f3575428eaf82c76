#!/usr/bin/env bash
# Issue 18's small all-reduce point on this machine's GPUs with the shipped table: OSU-style
# all-reduce 4 B to 256 KiB, NCCL against the tuned dispatcher (auto), 5 interleaved rounds,
# repeated RUNS times (default 2) so NCCL's two modes (NOTES.md) show as they come. Logs under $OUT.
# MCR_TUNING_TABLE, where set, is the table the dispatcher runs with.
set -uo pipefail
. lab/scripts/gpu_env.sh
[ -z "${MCR_TUNING_TABLE:-}" ] || X="$X -x MCR_TUNING_TABLE"
W=$OUT/small_ar; mkdir -p "$W"
for r in $(seq "${RUNS:-2}"); do
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$N" $X python3 -m benchmarks.osu_allreduce \
    -d cuda -t bfloat16 -c -m 4:256KiB -f 4 -i 24 -x 2 --batch 5 --max-seconds 0.3 --rounds 5 \
    --backend nccl,auto --csv "$W/small_ar.csv" > "$W/run$r.log" 2>&1
  echo "run $r rc=$?"; grep -a "^ *[0-9]\+ \+\(nccl\|auto\)" "$W/run$r.log"
done
