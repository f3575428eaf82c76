#!/usr/bin/env bash
# 4x GPUs, the 2026-11-28 third session, calls 2-3: the 4-GPU re-tune resumed from call 1's
# partial CSV (results/tune4/, carried) and checked; then, on that table, the parts in PARTS:
#   symm    symm's results against NCCL's (fast_worker --symm-only)
#   d8b     benchmarks.decode 8B, batch 1/16/64, graph and eager
#   moed    benchmarks.moe decode, 16/64/256 tokens, top-2, capacity 1.0
#   osu     OSU all-to-all, nccl vs symm, eager and in a graph
#   d70b    benchmarks.decode 70B slice, batch 1/16, graph and eager
#   moet    benchmarks.moe training, 512/4096 tokens
#   ds      DeepSpeed AutoTP decode, 8B, batch 1/16, eager
#   quick   fast_worker --quick (every GPU path against NCCL)
# Packed into $OUT/all.tgz; the table also lands in $OUT/w/tune/.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-590}
. lab/scripts/parts.sh
packed_call
T=results/tune4/nvidia-h200_np4
if [ ! -f $T.yaml ]; then
  run tune 150 python3 -m tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
      --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
      --interconnect NVLink --out $PWD/$T
  mkdir -p $OUT/tune && cp $T* $OUT/tune/
  run check 100 python3 -m tuner check $PWD/$T.yaml -d cuda -t bfloat16 \
      -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
  grep -A12 "^# op " $OUT/check.log >> $OUT/summary.txt
fi
[ -f $T.yaml ] && export MCR_TUNING_TABLE=$PWD/$T.yaml
echo "table: ${MCR_TUNING_TABLE:-shipped}" >> $OUT/summary.txt
export MCR_STALL_S=10
if has symm; then
  run symm_check 50 $R tests/workers/fast_worker.py --symm-only
  grep -h "symm:\|FAIL\|Error\|checks\|waited" $OUT/symm_check.log | head -6 >> $OUT/summary.txt
fi
if has d8b; then
  run d8b 170 $R -m benchmarks.decode --shape 8b --batch 1,16,64 --mode graph,eager --pairs 7 \
      --steps 24 --profile-steps 4 --out $OUT/decode
  grep -h "x \[\|tokens" $OUT/d8b.log | head -16 >> $OUT/summary.txt
fi
if has moed; then
  run moed 100 $R -m benchmarks.moe --shape large --tokens 16,64,256 --k 2 --capacity 1.0 \
      --step decode --pairs 7 --out $OUT/moe_d
  grep -h "x \[\|waited" $OUT/moed.log >> $OUT/summary.txt
fi
if has osu; then
  B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
  run osu_a2a 40 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
  run osu_a2a_graph 40 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
  grep -h "^ " $OUT/osu_a2a.log $OUT/osu_a2a_graph.log >> $OUT/summary.txt
fi
if has moet; then
  run moet 150 $R -m benchmarks.moe --shape large --tokens 512,4096 --k 2 --capacity 1.0 \
      --step train --pairs 7 --out $OUT/moe_t
  grep -h "x \[\|waited" $OUT/moet.log >> $OUT/summary.txt
fi
if has ds; then
  run ds 150 $R -m benchmarks.decode --impl deepspeed --shape 8b --batch 1,16 --mode eager \
      --steps 16 --pairs 7 --out $OUT/decode
  grep -h "x \[\|captur\|graphs" $OUT/ds.log | head -10 >> $OUT/summary.txt
fi
if has quick; then
  run quick 90 $R tests/workers/fast_worker.py --quick
  grep -h "OK\|FAIL\|Error" $OUT/quick.log | head -4 >> $OUT/summary.txt
fi
if has d70b; then
  run d70b 120 $R -m benchmarks.decode --shape 70b --batch 1,16 --mode graph,eager --pairs 7 \
      --steps 24 --profile-steps 4 --out $OUT/decode
  grep -h "x \[\|tokens" $OUT/d70b.log | head -10 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
