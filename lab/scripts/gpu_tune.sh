#!/usr/bin/env bash
# Issue 18's GPU acceptance on every GPU of the lent machine (on 2x H200: the 2-GPU table). Run
# from the repo root; logs go to $OUT. PART is one or more of (space-separated, in this order):
#   tune   the tuner for N GPUs: all ops, 4 B to 1 GiB, both profiles, plain and symmetric
#          (sdma) outputs; its wall time is the acceptance's "<= 5 minutes of GPU time"
#   check  the table's regret at sizes off its grid (median <= 2%, worst <= 8% per op)
#   osu    OSU-style, every op, 4 B to 1 GiB: NCCL against the tuned dispatcher (auto), in
#          interleaved rounds; all-gather again into symmetric outputs (FSDP2's zero-copy case)
#   pipe   sdma's pipelined schedule against whole blocks and NCCL, 8 MiB to 1 GiB, in one
#          process (lab/probes/probe_sdma_pipeline.py; the gpu test suite checks the schedule),
#          then plain all-gather and reduce-scatter again beside a GEMM (the overlap profile)
# SMOKE=1 narrows every size range to 4 KiB..4 MiB, to try the script on a one-GPU lease.
# OPS (default: all) tunes only these ops, comma-separated; check then measures those alone.
# Without tune, check and osu take the table an earlier tune left in /tmp/gpu_tune (a warm
# machine keeps it), else the shipped one; TABLE=STEM names another.
# $OUT keeps summary.log and results.tar (the table's yaml/csv/png, check log, OSU csv),
# refreshed after each step so a run cut short still brings back what it made.
set -uo pipefail
. lab/scripts/gpu_env.sh
PART=" ${PART:-tune check osu} "
has() { [[ "$PART" == *" $1 "* ]]; }
W=/tmp/gpu_tune; if has tune; then rm -rf "$W"; fi; mkdir -p "$W"
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
SIZES=$([ "${SMOKE:-0}" = 1 ] && echo 4KiB:4MiB || echo 4:1GiB)
CLASS=$(system_class)
TABLE=${TABLE:-$W/${CLASS}_np$N}
BE="--backend nccl,sdma,sdma_pipe,symm --symm sdma"
step_lines() { grep -av "size/s\|^\s*$" "$1"; }   # tables and regret rows: every line
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-?}, sizes $SIZES"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
if has tune; then
  TAILN=12 step tune "${TUNE_LIMIT:-420}" $MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m "$SIZES" --batch 5 $BE \
    --profiles standalone,overlap --interconnect NVLink --out "$TABLE" --fresh ${OPS:+--ops "$OPS"}
  python3 -m mcr.tuner show "$TABLE.yaml" > "$W/show.txt" 2>&1; head -60 "$W/show.txt"
fi
[ -f "$TABLE.yaml" ] || TABLE="mcr/tuning_tables/${CLASS}_np$N"   # check/osu alone: the shipped one
if has check; then
  TAILN=14 step check 300 $MPI python3 -m mcr.tuner check "$TABLE.yaml" -d cuda -t bfloat16 \
    -m "$SIZES" --batch 5 $BE
fi
if has osu; then
  B="-d cuda -t bfloat16 -c --csv $W/osu_tuned.csv -i 24 -x 2 --batch 5 --max-seconds 0.3 --rounds 3"
  for op in osu_allreduce osu_allgather osu_reducescatter osu_bcast osu_alltoall; do
    MCR_TUNING_TABLE="$TABLE.yaml" TAILN=30 step "${op}_tuned" 150 \
      $MPI -x MCR_TUNING_TABLE python3 -m benchmarks.$op $B -m "$SIZES" -f 4 --backend nccl,auto
  done
  MCR_TUNING_TABLE="$TABLE.yaml" TAILN=30 step osu_allgather_symm 150 \
    $MPI -x MCR_TUNING_TABLE python3 -m benchmarks.osu_allgather $B -m "$SIZES" -f 4 \
    --backend nccl,auto --symm sdma
fi
if has pipe; then
  TAILN=30 step sdma_pipeline 200 $MPI python3 -m lab.probes.probe_sdma_pipeline \
    --sizes "${PIPE_SIZES:-8MiB:1GiB}" --csv "$W/sdma_pipeline.csv"
  TAILN=30 step sdma_pipeline_load 200 $MPI python3 -m lab.probes.probe_sdma_pipeline --load 4096 \
    --sizes "${PIPE_SIZES:-8MiB:1GiB}" --ops all_gather,reduce_scatter --csv "$W/sdma_pipeline_load.csv"
fi
} 2>&1 | tee "$OUT/summary.log"
tar -cf "$OUT/results.tar" -C "$W" .
