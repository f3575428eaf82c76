#!/usr/bin/env bash
# 1x H200 (2026-11-29, only kind lent): does destroy_process_group() return after CUDA graphs
# captured NCCL collectives, with the graphs dropped and kept alive? World size 1 (NCCL still
# launches its kernel; mcr has no np1 table and sends every call to its own NCCL group).
# Predictions: every variant with graphs dropped returns in < 1 s; with graphs kept alive,
# plain NCCL too hangs (NCCL's finalize waits for the graph's persistent work), so the 4x HF
# probe's hang (it kept its graphs) is torch+NCCL behaviour, not mcr's.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
. lab/scripts/parts.sh
packed_call
for v in plain mcr_nccl mcr mcr_nocap; do
  for k in "" --keep-graph; do
    [ "$v" = mcr_nocap ] && [ -n "$k" ] && continue
    run destroy_${v}${k:+_keep} 75 $R lab/probes/destroy_after_capture.py $v $k
    grep -h "DESTROYED\|destroying\|File\|Timeout\|Error" $OUT/destroy_${v}${k:+_keep}.log \
      | cut -c1-200 | head -12 >> $OUT/summary.txt
  done
done
