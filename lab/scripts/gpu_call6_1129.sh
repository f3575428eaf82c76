#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 6: what the uneven kernel's fixed grid (the group's largest, 64
# blocks at 1 MiB) costs against a grid of the call's own size and against the equal-split
# kernel, 2 ranks as streams on one GPU, each rank's 200 calls in a CUDA graph.
# Prediction: the 64-block grid adds under 1 us a call at 64 B-4 KiB a peer.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
. lab/scripts/parts.sh
packed_call
run time 120 python3 lab/probes/ll_streams_time.py
cat $OUT/time.log >> $OUT/summary.txt
cat $OUT/summary.txt
