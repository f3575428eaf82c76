#!/usr/bin/env bash
# One device call that does the most useful open work for whatever machine came (the H200 kinds
# have often given H100s): run from the repo root with .whl carried and COMMIT=<hash>; every
# file under $OUT ends in one all.tar (few files come back well). LIMIT (default 570) is the
# seconds the call may take.
#   2x any    issue 18: a fresh table, its check and OSU (gpu_lease.sh CALL=1 TESTS=0), then
#             the small all-reduce point with that table (gpu_small_ar.sh); on H100s this
#             refreshes their table (the tuner's newer rules, symm's broadcast measured)
#   4x H200   issue 14: a fresh table, its check and OSU (gpu_lease4.sh tune osu)
#   4x other  ZeRO-3 large under the overlap rules (auto) against the standalone ones: three
#             processes of 12 pairs each (4 pairs moved 0.95-1.15x from process to process)
#   other     nothing planned; says so
set -uo pipefail
O=${OUT:?OUT must name the output folder}
T0=$SECONDS
LIMIT=${LIMIT:-570}
left() { echo $((LIMIT - (SECONDS - T0))); }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
echo "# $(date -Iseconds) $name x$n, tree ${COMMIT:-?}"
case "$n:$name" in
2:*)
  timeout "$(left)" env TESTS=0 CALL=1 OUT="$O/lease" bash lab/scripts/gpu_lease.sh
  table=$(ls /tmp/gpu_tune/*_np2.yaml 2>/dev/null | head -1)
  if [ -n "$table" ] && [ "$(left)" -gt 60 ]; then
    MCR_TUNING_TABLE=$table RUNS=1 OUT="$O/lease" timeout "$(left)" bash lab/scripts/gpu_small_ar.sh
  fi
  cp /tmp/gpu_tune/*_np2.* "$O/lease/" 2>/dev/null ;;
4:*H200*)
  timeout "$(left)" env PARTS="tune osu" DEADLINE=$((LIMIT - 10)) OUT="$O/l4" \
    bash lab/scripts/gpu_lease4.sh
  cp /tmp/gpu_tune/*_np4.* "$O/l4/" 2>/dev/null ;;
4:*)
  for run in 1 2 3; do
    timeout "$(left)" env OUT="$O/zero3_$run" PART=steps FRAMEWORKS=deepspeed SHAPES=large \
      CONFIGS=plain,mcr,mcr-standalone PAIRS=12 PROFILE_STEPS=0 bash lab/scripts/gpu_train.sh \
      > /dev/null 2>&1
    echo "run $run at $((SECONDS - T0)) s"; grep -a "rc=" "$O/zero3_$run/summary.log"
  done ;;
*)
  echo "nothing planned for $n x $name" ;;
esac
cd "$O" && tar -cf all.tar --exclude=all.tar -- * && find . -type f ! -name all.tar -delete
echo "gpu_next done at $((SECONDS - T0)) s"
