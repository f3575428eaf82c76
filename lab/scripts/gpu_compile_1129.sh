#!/usr/bin/env bash
# 1x H200 (2026-11-29; 2-4x when lent): mcr under torch.compile on GPUs with torch 2.11.
# mcr.comm's collectives in a compiled function with CUDA graphs (reduce-overhead), compared
# with the uncompiled code bit for bit, graph breaks counted; DDP compiled whole on the mcr
# backend against plain NCCL. Predictions: COMPILE OK on every rank, no graph break for the
# in-graph forms (torch 2.11 has trace_rules.add and substitute_in_graph); ddpc losses equal.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run compile 150 $R tests/workers/compile_worker.py cuda
grep -ah "COMPILE\|Error\|served\|warn" $OUT/compile.log | cut -c1-300 | head -12 >> $OUT/summary.txt
for be in mcr nccl; do
  run ddpc_$be 90 $R tests/workers/torch_backend_worker.py ddpc $be cuda
  grep -ah "LOSSES\|Error" $OUT/ddpc_$be.log | cut -c1-300 | head -4 >> $OUT/summary.txt
done
cat $OUT/summary.txt
