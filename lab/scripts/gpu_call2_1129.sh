#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 2: where tests/test_symm_ll_gpu.py's first case hung (call 1: rank
# 0 trapped waiting for rank 1's data of block call number 4). One process per mode.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-240}
. lab/scripts/parts.sh
packed_call
for m in sync-each nosleep old-only av-only; do
  run dbg_$m 40 python3 lab/probes/ll_streams_debug.py $m 2
  tail -3 $OUT/dbg_$m.log >> $OUT/summary.txt
done
cat $OUT/summary.txt
