#!/usr/bin/env bash
# 2026-11-28, sixth session, call 6 (4x H200): symm's low-latency kernel polling its peers'
# lines together (and keeping its own word in a register) against the kernel before
# (lab/probes/ll_prev.cu), then the tree with it: every GPU path against NCCL, special values,
# decode in a graph, OSU all-to-all in a graph, the floor probe.
# As run at c567799. After it the variant was not kept: it is lab/probes/ll_poll_together.patch,
# the shipped kernel is ll_prev.cu's again, and the probe's LL_PREV is now LL_ALT.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
PARTS=kernels LL_PREV=lab/probes/ll_prev.cu run ll 70 $R -m lab.probes.probe_ll_variants
grep -h "^ \|GPU us\|Error" $OUT/ll.log | cut -c1-400 >> $OUT/summary.txt
run quick 90 $R tests/workers/fast_worker.py --quick
grep -h "OK\|FAIL\|Error" $OUT/quick.log | cut -c1-200 | head -6 >> $OUT/summary.txt
run special 60 mpirun -n $N --oversubscribe python3 tests/workers/special_worker.py \
    --device cuda --backends nccl,sdma,symm,auto
grep -h "OK\|FAIL\|Error" $OUT/special.log | cut -c1-200 | head -6 >> $OUT/summary.txt
run d8b 60 $R -m benchmarks.decode --shape 8b --batch 1,16 --mode graph --pairs 7 --steps 24 \
    --out $OUT/decode
run d70b 45 $R -m benchmarks.decode --shape 70b --batch 1 --mode graph --pairs 7 --steps 24 \
    --out $OUT/decode
grep -h "ms/token" $OUT/d8b.log $OUT/d70b.log | cut -c1-260 >> $OUT/summary.txt
B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
run osu_a2a_graph 40 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph
grep -h "^ " $OUT/osu_a2a_graph.log >> $OUT/summary.txt
run floor4 40 $R -m lab.probes.probe_nvlink_floor
grep -h "one-way\|GPU us\|Error" $OUT/floor4.log | cut -c1-300 >> $OUT/summary.txt
cat $OUT/summary.txt
