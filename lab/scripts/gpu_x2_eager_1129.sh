#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 3): issue 51's eager decode at batch 1 on 2 GPUs,
# 25 pairs (11-28: 8B 1.256x, 70B slice 1.287x on 15 pairs; target 1.30x), and issue 55's OSU
# all-to-all (equal splits) symm against NCCL, eager and in a CUDA graph, at 2 GPUs (the
# equal-split host path lost ~7 us a call on 11-28's seventh session).
# Predictions: eager 8B and 70B slice 1.22-1.32x (host-bound; either side of 1.30x); OSU
# eager 1.9-2.5x up to 64 KiB a peer, graph 2.5-3.2x.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
for s in 8b 70b; do
  run eager_$s 95 $R -m benchmarks.decode --shape $s --batch 1 --mode eager --pairs 25 \
      --steps 24 --out $OUT/decode
done
grep -h "ms/token" $OUT/eager_*.log | cut -c1-260 >> $OUT/summary.txt
B="-d cuda -t bfloat16 -m 4:1MiB -f 4 --backend nccl,symm --rounds 3"
run osu_a2a 70 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
run osu_a2a_graph 70 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
grep -h "^ \|Error" $OUT/osu_a2a*.log | cut -c1-120 >> $OUT/summary.txt
cat $OUT/summary.txt
