#!/usr/bin/env bash
# 2026-11-28, sixth session, call 2 (4x H200), on the 4-GPU table re-tuned in call 1 (now in
# tuning_tables/). DeepSpeed travels as wheels (carry .whl).
#   check   mcr-tune check of that table off its grid (regret per op)
#   eager   benchmarks.decode 8B and 70B slice batch 1 eager, 11 pairs, slowest-rank blocks
#   osu     OSU all-to-all nccl vs symm, eager and in a graph
#   moe     benchmarks.moe decode 16/64 tokens, capacity 1.0 and drop-less (uneven rule)
#   ds      DeepSpeed AutoTP 8B batch 1 eager, 7 pairs
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-560}; PARTS=${PARTS:-check eager osu moe ds}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
if has check; then
  run check 100 python3 -m tuner check tuning_tables/nvidia-h200_np4.yaml -d cuda -t bfloat16 \
      -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
  grep -A14 "^# op " $OUT/check.log >> $OUT/summary.txt
fi
if has eager; then
  for s in 8b 70b; do
    run eager_$s 75 $R -m benchmarks.decode --shape $s --batch 1 --mode eager --pairs 11 \
        --steps 24 --out $OUT/decode
  done
  grep -h "ms/token" $OUT/eager_*.log | cut -c1-260 >> $OUT/summary.txt
fi
if has osu; then
  B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
  run osu_a2a 40 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
  run osu_a2a_graph 40 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
  grep -h "^ " $OUT/osu_a2a.log $OUT/osu_a2a_graph.log >> $OUT/summary.txt
fi
if has moe; then
  run moe 110 $R -m benchmarks.moe --shape large --tokens 16,64 --k 2 \
      --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
  grep -h "x \[\|waited\|Error" $OUT/moe.log | head -20 >> $OUT/summary.txt
fi
if has ds; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > $OUT/pip.log 2>&1
  run ds 110 env PYTHONPATH=/tmp/site:$PYTHONPATH $R -m benchmarks.decode --impl deepspeed \
      --shape 8b --batch 1 --mode eager --steps 16 --pairs 7 --out $OUT/decode
  grep -h "x \[\|captur\|graphs\|Error" $OUT/ds.log | cut -c1-260 | head -10 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
