#!/usr/bin/env bash
# Which of the 4-GPU table's overlap rules ZeRO-3 large pays for (NOTES.md: at 4 GPUs it ran
# 0.95-0.99x of NCCL under MCR_PROFILE=auto, 1.00-1.05x under the standalone rules). Three
# variants of the shipped table for this GPU count (lab/probes/table_variant.py), each its own
# train_step process with plain, mcr (the variant under auto) and mcr-standalone alternated:
#   ag   overlap rules for all-gathers only (reduce-scatters take the standalone rules)
#   rs   overlap rules for reduce-scatters only
#   big  overlap rules from 16 MiB only (smaller calls take the standalone rules)
# Run from the repo root with .whl carried; VARIANTS (default "ag rs big"), PAIRS (default 4).
set -uo pipefail
. lab/scripts/gpu_env.sh
O=$OUT
CLASS=$(system_class)
SRC=mcr/tuning_tables/${CLASS}_np$N.yaml
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, tree ${COMMIT:-?}, from $SRC"
for v in ${VARIANTS:-ag rs big}; do
  case $v in
  ag) args="--drop reduce_scatter" ;;
  rs) args="--drop all_gather" ;;
  big) args="--overlap-from 16MiB" ;;
  *) echo "unknown variant $v"; exit 2 ;;
  esac
  python3 lab/probes/table_variant.py "$SRC" "/tmp/variant_$v.yaml" --group "$N" $args || exit 1
  t0=$SECONDS
  MCR_TUNING_TABLE=/tmp/variant_$v.yaml OUT=$O/$v PART=steps FRAMEWORKS=deepspeed SHAPES=large \
    CONFIGS=plain,mcr,mcr-standalone PAIRS=${PAIRS:-4} PROFILE_STEPS=0 \
    bash lab/scripts/gpu_train.sh > /dev/null 2>&1
  cp "/tmp/variant_$v.yaml" "$O/$v/"
  echo "$v: $((SECONDS - t0)) s"; grep -a "rc=\|ratio_m" "$O/$v/summary.log"
done
