#!/usr/bin/env bash
# 2026-11-28, sixth session, call 3 (4x H200), the table re-tuned in call 1. DeepSpeed travels
# as wheels (carry .whl); call 2's MoE part lacked them on its path.
#   moe     benchmarks.moe decode 16/64 tokens, capacity 1.0 and drop-less (uneven rule)
#   ds      DeepSpeed AutoTP 8B batch 1 eager, 15 pairs
#   eager   benchmarks.decode 8B batch 1 eager, 15 pairs, slowest-rank blocks
#   osu     OSU all-to-all nccl vs symm, eager (a second sample of call 2's)
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-500}; PARTS=${PARTS:-moe ds eager osu}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
deepspeed_wheels
if has moe; then
  run moe 130 $R -m benchmarks.moe --shape large --tokens 16,64 --k 2 \
      --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
  grep -h "x \[\|waited\|Error" $OUT/moe.log | cut -c1-260 | head -20 >> $OUT/summary.txt
fi
if has ds; then
  run ds 150 $R -m benchmarks.decode --impl deepspeed --shape 8b --batch 1 --mode eager \
      --steps 16 --pairs 15 --out $OUT/decode
  grep -h "x \[\|captur\|graphs\|Error" $OUT/ds.log | cut -c1-260 | head -10 >> $OUT/summary.txt
fi
if has eager; then
  run eager_8b 80 $R -m benchmarks.decode --shape 8b --batch 1 --mode eager --pairs 15 \
      --steps 24 --out $OUT/decode
  grep -h "ms/token" $OUT/eager_*.log | cut -c1-260 >> $OUT/summary.txt
fi
if has osu; then
  B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
  run osu_a2a 40 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
  grep -h "^ " $OUT/osu_a2a.log >> $OUT/summary.txt
fi
cat $OUT/summary.txt
