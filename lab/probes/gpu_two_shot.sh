#!/usr/bin/env bash
# symm's one-shot against two-shot all-reduce kernel on this machine's GPUs: OSU-style all-reduce,
# 16 KiB to 1 MiB, symm beside NCCL, with MCR_SYMM_TWO_SHOT_BYTES at its default (512 KiB: one
# shot below) and at each of TSB, alternated default / other / default / other ... ROUNDS times.
# Logs under $OUT. Run from the repo root on a GPU machine.
set -uo pipefail
. lab/scripts/gpu_env.sh
W=$OUT/two_shot; mkdir -p "$W"
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X -x MCR_SYMM_TWO_SHOT_BYTES"
for r in $(seq "${ROUNDS:-2}"); do
  for tsb in 512KiB ${TSB:-64KiB}; do
    export MCR_SYMM_TWO_SHOT_BYTES=$tsb
    timeout 90 $MPI python3 -m benchmarks.osu_allreduce -d cuda -t bfloat16 -c -m 16KiB:1MiB -f 2 \
      --backend nccl,symm --batch 5 -i 24 -x 2 --max-seconds 0.3 --rounds 3 \
      --csv "$W/two_shot_$tsb.csv" > "$W/r${r}_$tsb.log" 2>&1
    echo "round $r two-shot from $tsb rc=$?"
    grep -a "^ *[0-9]\+ \+symm" "$W/r${r}_$tsb.log"
  done
done
