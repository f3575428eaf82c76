#!/usr/bin/env bash
# The overlap profile's load (NOTES, "GEMMs that cover the call"): two tables
# tuned on this machine for all-gather and reduce-scatter, one with a single 4096^3 GEMM beside
# each overlap-profile call (--overlap-load one, the default) and one with as many as
# cover the call (cover), then the overlap benchmark (20 GEMMs beside 10 x 256 MiB all-gathers)
# on each table in turns one cover one cover, NCCL beside the dispatcher each time, into plain
# and symmetric outputs; then (PART steps) ZeRO-3 large, plain against mcr with the cover table
# and mcr under the standalone rules. Run from the repo root (.whl carried for steps); logs
# under $OUT. PART: any of "test tune overlap steps" (default all).
set -uo pipefail
. lab/scripts/gpu_env.sh
W=/tmp/gpu_overlap_load; mkdir -p "$W"
PART=" ${PART:-test tune overlap steps} "
has() { [[ "$PART" == *" $1 "* ]]; }
MPI="mpirun --allow-run-as-root --oversubscribe -np $N $X"
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-?}"
if has test; then
  step gpu_test 120 python3 -m pytest -q -x tests/test_measure.py -k overlap_load -p no:cacheprovider
fi
if has tune; then
  for load in one cover; do
    TAILN=3 step "tune_$load" 240 $MPI python3 -m mcr.tuner -d cuda -t bfloat16 -m 4:1GiB \
      --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma --ops all_gather,reduce_scatter \
      --profiles standalone,overlap --overlap-load "$load" --interconnect NVLink \
      --out "$W/$load" --fresh
    python3 -m mcr.tuner show "$W/$load.yaml" 2>&1 | grep -a -A12 "overlap" | head -30
  done
fi
if has overlap; then
  for load in one cover one cover; do
    MCR_TUNING_TABLE="$W/$load.yaml" TAILN=4 step "overlap_$load" 120 torchrun --standalone \
      --nproc_per_node="$N" -m benchmarks.overlap --backend nccl,auto,auto+symm --reps 5 \
      --csv "$W/overlap_$load.csv"
  done
fi
if has steps; then
  MCR_TUNING_TABLE="$W/cover.yaml" OUT=$W/steps PART=steps SHAPES=large FRAMEWORKS=deepspeed \
    CONFIGS=plain,mcr,mcr-standalone PAIRS=${PAIRS:-5} PROFILE_STEPS=0 \
    bash lab/scripts/gpu_train.sh > /dev/null 2>&1
  grep -av "^bypassed" "$W/steps/summary.log" | tail -20
fi
} 2>&1 | tee "$OUT/summary.log"
tar -cf "$OUT/results.tar" -C "$W" .
