#!/usr/bin/env bash
# 2026-11-28, sixth session, call 5 (4x H200): the floor under a push-based small all-reduce
# (lab/probes/probe_nvlink_floor.py): one-way NVLink trip, a flag-only barrier in a graph chain
# beside an empty kernel and mcr's 8 KiB low-latency all-reduce; at 4 ranks and at 2.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
. lab/scripts/parts.sh
packed_call
run floor4 60 $R -m lab.probes.probe_nvlink_floor
run floor2 60 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    -m lab.probes.probe_nvlink_floor
grep -h "one-way\|GPU us\|Error" $OUT/floor*.log | cut -c1-300 >> $OUT/summary.txt
cat $OUT/summary.txt
