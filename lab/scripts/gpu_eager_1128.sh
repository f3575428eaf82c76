#!/usr/bin/env bash
# 2026-11-28, fifth session, 2x H200: where eager TP decode's time goes per rank
# (lab/probes/eager_where.py): floor, plain NCCL, mcr, the low-latency kernel launched bare.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
for s in 8b 70b; do
  run eager_$s 150 $R -m lab.probes.eager_where --shape $s --rounds 7 --steps 24 --profile 6
done
grep -h "rank\|ceiling\|ratios\|served by" $OUT/eager_*.log | cut -c1-220 >> $OUT/summary.txt
