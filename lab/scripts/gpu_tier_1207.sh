#!/usr/bin/env bash
# 2026-12-07 (fifth session), 1x GPU: the GPU tier on the submitted tree (tests needing 2+ GPUs
# skip). Prediction: every test that runs passes.
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-480}
run gpu_tier 460 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -rs
tail -25 $OUT/gpu_tier.log >> $OUT/summary.txt
