#!/usr/bin/env bash
# 2026-11-28, sixth session, call 7 (4x H200): eager decode batch 1 at 25 pairs, 8B and the
# 70B slice (calls 2-4 gave 1.27x / 1.32x and 1.37x / 1.13x at 11 and 15 pairs).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-200}
. lab/scripts/parts.sh
packed_call
for s in 8b 70b; do
  run eager_$s 95 $R -m benchmarks.decode --shape $s --batch 1 --mode eager --pairs 25 \
      --steps 24 --out $OUT/decode
done
grep -h "ms/token" $OUT/eager_*.log | cut -c1-260 >> $OUT/summary.txt
cat $OUT/summary.txt
