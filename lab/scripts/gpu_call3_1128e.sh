#!/usr/bin/env bash
# 2026-11-28, fifth session, call 3 (2x H200): eager TP decode at batch 1 with more pairs and
# longer blocks (every block its slowest rank's), 8B-like and the 70B-like slice.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
. lab/scripts/parts.sh
packed_call
for s in 8b 70b; do
  run eager_$s 190 $R -m benchmarks.decode --shape $s --batch 1 --mode eager --pairs 15 \
      --steps 48 --out $OUT/decode
done
grep -h "ms/token" $OUT/eager_*.log >> $OUT/summary.txt
cat $OUT/summary.txt
