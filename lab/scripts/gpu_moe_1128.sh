#!/usr/bin/env bash
# 2x H200, call 2 of the 2026-11-28 session, with the re-tuned 2-GPU table: symm's checks
# against NCCL (all-to-all included), OSU all-to-all NCCL / symm / the table's choice (eager and
# in a graph), FSDP2 through the backend with a profile of each copy, then benchmarks/moe.py
# (decode-size forwards and training steps). Everything under $OUT/w is packed into
# $OUT/all.tgz at exit (a call brings back 8 files at most).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}; PARTS=${PARTS:-check osu fsdp moe}
. lab/scripts/parts.sh
packed_call
if has check; then
  run symm_check 90 $R tests/workers/fast_worker.py --symm-only
  grep -h "symm:\|FAIL\|Error\|OK\|checks" $OUT/symm_check.log | head -8 >> $OUT/summary.txt
fi
if has osu; then
  B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm,auto --rounds 3"
  run osu_a2a 60 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3 --csv $OUT/osu_a2a.csv
  run osu_a2a_graph 60 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph --csv $OUT/osu_a2a_graph.csv
  grep -h "^ " $OUT/osu_a2a.log $OUT/osu_a2a_graph.log >> $OUT/summary.txt
fi
if has fsdp; then
  run fsdp 120 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 7 --mcr-nccl --profile $OUT/prof
  grep -h "RESULT" $OUT/fsdp.log | cut -c1-600 >> $OUT/summary.txt
fi
if has moe; then
  run moe_decode 150 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
      --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
  run moe_train 150 $R -m benchmarks.moe --shape large --tokens 512,4096 --k 2 \
      --capacity 1.0 --step train --pairs 7 --out $OUT/moe_train
  grep -h "x \[\|ms/step\|captured\|served" $OUT/moe_decode.log $OUT/moe_train.log | head -40 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
