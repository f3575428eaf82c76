#!/usr/bin/env bash
# 2026-12-07 (sixth session), 1x GPU: the CPU stand-in host cost on a GPU host (after the
# hot-path changes ff5c54d..9acab20), then the GPU tier (tests needing 2+ GPUs skip).
# Predictions: host cost sync +0.9-1.6 us, async+wait +1.7-3 us over torch (a GPU host's
# Python runs slower than this box's fast mode); every GPU test that runs passes.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
for i in 1 2; do
  run host_cost 60 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      -m benchmarks.dispatch_overhead
done
grep -A6 "no-op" $OUT/host_cost.log >> $OUT/summary.txt
run gpu_tier 440 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -rs
tail -25 $OUT/gpu_tier.log >> $OUT/summary.txt
