#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 2: after the symm double-replay fix, symm's
# all-to-all on by default and the re-tuned 2x H200 table shipped. symm checked against NCCL
# (buffers moving differently per rank included), the drop-less MoE layer that hung, moe.py
# decode and training, OSU all-to-all. MCR_TUNING_TABLE names the shipped 2x H200 table so an
# H100 host runs it too. Packed into $OUT/all.tgz at exit.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
. lab/scripts/parts.sh
packed_call
export MCR_TUNING_TABLE=$PWD/tuning_tables/nvidia-h200_np2.yaml MCR_STALL_S=10
run symm_check 90 $R tests/workers/fast_worker.py --symm-only
grep -h "symm:\|FAIL\|Error\|checks\|waited" $OUT/symm_check.log | head -8 >> $OUT/summary.txt
run moe_decode 200 $R lab/probes/faulthandler_run.py 150 -m benchmarks.moe --shape large \
    --tokens 16,64,256 --k 2 --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe_d
grep -h "x \[\|waited\|fallback\|all_to_all  " $OUT/moe_decode.log >> $OUT/summary.txt
run moe_train 140 $R -m benchmarks.moe --shape large --tokens 512,4096 --k 2 --capacity 1.0 \
    --step train --pairs 7 --out $OUT/moe_t
grep -h "x \[\|waited" $OUT/moe_train.log >> $OUT/summary.txt
B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
run osu_a2a 50 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3
run osu_a2a_graph 50 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
grep -h "^ " $OUT/osu_a2a.log $OUT/osu_a2a_graph.log >> $OUT/summary.txt
cat $OUT/summary.txt
