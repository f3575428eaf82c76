#!/usr/bin/env bash
# 2026-11-28, seventh session, call 2 (for 4x H200, or 2x where only that is lent): the
# equal-split all_to_all_single short path on GPUs. Carry .whl (DeepSpeed wheels;
# .whl/old/collectives.py and comm.py are c7fa483's, before the short path: comm.py then takes
# all_to_all_single from collectives.py, not from alltoall.py).
#   check   fast_worker --quick (every backend against NCCL, the short path's a2a included)
#   osu     OSU all-to-all nccl vs symm eager, the tree's collectives.py and the old one in
#           turns new/old/old/new; then in a CUDA graph (new)
#   host    dispatch_overhead -d cuda --op all_to_all (symm and NCCL through mcr vs torch's)
#   moe     benchmarks.moe decode 16/64 tokens, capacity 1.0, 7 pairs
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}; PARTS=${PARTS:-check osu host moe}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
deepspeed_wheels
cp mcr/collectives.py mcr/comm.py /tmp/
if has check; then
  run check 120 $R tests/workers/fast_worker.py --quick
  grep -h "OK\|FAIL\|Error" $OUT/check.log | head -6 >> $OUT/summary.txt
fi
if has osu; then
  B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
  for v in new old old new; do
    if [ $v = old ]; then cp .whl/old/collectives.py .whl/old/comm.py mcr/
    else cp /tmp/collectives.py /tmp/comm.py mcr/; fi
    echo "== $v" >> $OUT/osu_a2a.log
    run osu_a2a 45 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
  done
  cp /tmp/collectives.py /tmp/comm.py mcr/
  grep -h "^==\|symm  \|nccl  " $OUT/osu_a2a.log | cut -c1-120 >> $OUT/summary.txt
  run osu_a2a_graph 50 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
  grep -h "^ " $OUT/osu_a2a_graph.log >> $OUT/summary.txt
fi
if has host; then
  run host 60 $R -m benchmarks.dispatch_overhead -d cuda --op all_to_all --rounds 100
  grep -h "^  " $OUT/host.log | cut -c1-150 >> $OUT/summary.txt
fi
if has moe; then
  run moe 150 $R -m benchmarks.moe --shape large --tokens 16,64 --k 2 --capacity 1.0 \
      --step decode --pairs 7 --out $OUT/moe
  grep -h "x \[\|waited\|Error" $OUT/moe.log | cut -c1-260 | head -20 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
