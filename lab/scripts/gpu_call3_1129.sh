#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 3: call 2 found the hang was CUDA's lazy loading (torch's sleep
# kernel, first launched behind a spinning rank, waited for it); with the sleep kernel loaded
# first: the debug sequence with sleeps, then the test (2-4 ranks as streams, pdl off/on).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
run dbg_sync-each-warm 40 python3 lab/probes/ll_streams_debug.py sync-each 2 warm
tail -2 $OUT/dbg_sync-each-warm.log >> $OUT/summary.txt
run ll_gpu 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_symm_ll_gpu.py
tail -4 $OUT/ll_gpu.log >> $OUT/summary.txt
cat $OUT/summary.txt
