#!/usr/bin/env bash
# Issue 14 on a machine of 4 GPUs (it takes the count from the machine), in device calls under
# the 600 s a call may run, from the repo root with the git-ignored .whl folder carried. PARTS
# runs in order; a part whose estimate does not fit before DEADLINE (seconds from the start,
# default 570) is skipped and named, so the next call can take it. Each part's files go to a
# folder of its own under $OUT:
#   tune     a fresh table for N GPUs and its power-of-two sub-groups: all ops, 4 B to 1 GiB,
#            both profiles, plain and symmetric outputs, then its check (regret off the grid);
#            gpu_tune.sh leaves it in /tmp/gpu_tune, where a warm machine keeps it
#   osu      OSU-style, every op, tuned dispatcher against NCCL (gpu_tune.sh osu)
#   overlap  the overlap benchmark (20 GEMMs beside 10 x 256 MiB all-gathers): NCCL, the
#            dispatcher into plain outputs and into symmetric ones (FSDP2's zero-copy case)
#   steps    issue 11's train_step, both frameworks and shapes, CONFIGS (default plain,mcr;
#            mcr-standalone adds the standalone rules), PAIRS rounds
#   hier     gpu_hier.sh: the GPUs as 2 nodes, NCCL on the loopback socket, hier against flat
#   exact    tests/workers/fast_worker.py at N GPUs: sdma and symm against NCCL's results
# The table in force after tune is the fresh one; without a tune on this machine, the one
# shipped for this GPU count (copy a fresh table into mcr/tuning_tables/ to carry it).
set -uo pipefail
O=${OUT:?OUT must name the output folder}
T0=$SECONDS
declare -A EST=([tune]=470 [osu]=150 [overlap]=30 [steps]=250 [hier]=160 [exact]=60)
. lab/scripts/gpu_env.sh
CLASS=$(system_class)
fresh() { ls /tmp/gpu_tune/"${CLASS}_np$N".yaml 2>/dev/null || echo "mcr/tuning_tables/${CLASS}_np$N.yaml"; }
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N; table class $CLASS"
for part in ${PARTS:-tune osu overlap steps}; do
  left=$(( ${DEADLINE:-570} - (SECONDS - T0) ))
  if (( ${EST[$part]:?unknown part $part} > left )); then
    echo "skipped $part: needs ~${EST[$part]} s, $left s left"; continue
  fi
  echo "== $part at $((SECONDS - T0)) s"
  case $part in
  tune)
    OUT=$O/tune PART="tune check" TUNE_LIMIT=400 bash lab/scripts/gpu_tune.sh > /dev/null
    grep -a "rc=\|^  [a-z]\|counted\|mcr-tune: 0\|groups\?" "$O/tune/summary.log" ;;
  osu)
    OUT=$O/osu PART=osu TABLE=$(fresh | sed 's/\.yaml$//') bash lab/scripts/gpu_tune.sh > /dev/null
    grep -a "rc=" "$O/osu/summary.log" ;;
  overlap)
    mkdir -p "$O/overlap"
    MCR_TUNING_TABLE=$(fresh) timeout 120 torchrun --standalone --nproc_per_node="$N" \
      -m benchmarks.overlap --backend nccl,auto,auto+symm --reps 7 --csv "$O/overlap/overlap.csv" \
      > "$O/overlap/overlap.log" 2>&1
    echo "overlap rc=$?"; grep -a "^#\|^  " "$O/overlap/overlap.log" ;;
  steps)
    MCR_TUNING_TABLE=$(fresh) OUT=$O/steps PART=steps CONFIGS=${CONFIGS:-plain,mcr} \
      PAIRS=${PAIRS:-5} \
      bash lab/scripts/gpu_train.sh > /dev/null
    grep -av "^bypassed" "$O/steps/summary.log" ;;
  hier)
    OUT=$O/hier bash lab/scripts/gpu_hier.sh > /dev/null
    grep -a "rc=\|^  \|ratio" "$O/hier/summary.log" | tail -40 ;;
  exact)
    mkdir -p "$O/exact"
    timeout 150 mpirun --allow-run-as-root --oversubscribe -np "$N" $X python3 \
      tests/workers/fast_worker.py --big 256MiB > "$O/exact/fast_worker.log" 2>&1
    echo "fast_worker rc=$?"; tail -5 "$O/exact/fast_worker.log" ;;
  esac
done
echo "lease4 done at $((SECONDS - T0)) s"
