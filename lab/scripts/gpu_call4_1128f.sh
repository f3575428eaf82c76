#!/usr/bin/env bash
# 2026-11-28, sixth session, call 4 (4x H200): the tree as submitted (MCR_SYMM_PDL off, the
# re-tuned 4-GPU table shipped).
#   quick    fast_worker --quick (every GPU path against NCCL)
#   special  special values on nccl, sdma, symm and auto
#   graph    benchmarks.decode 8B batch 64 and 70B slice batch 16 in a graph (the rows call 1
#            did not take), 7 pairs
#   eager    benchmarks.decode 70B slice batch 1 eager, 15 pairs
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-400}; PARTS=${PARTS:-quick special graph eager}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
if has quick; then
  run quick 90 $R tests/workers/fast_worker.py --quick
  grep -h "OK\|FAIL\|Error" $OUT/quick.log | cut -c1-200 | head -6 >> $OUT/summary.txt
fi
if has special; then
  run special 80 mpirun -n $N --oversubscribe python3 tests/workers/special_worker.py \
      --device cuda --backends nccl,sdma,symm,auto
  grep -h "OK\|FAIL\|Error" $OUT/special.log | cut -c1-200 | head -6 >> $OUT/summary.txt
fi
if has graph; then
  run g8b 60 $R -m benchmarks.decode --shape 8b --batch 64 --mode graph --pairs 7 --steps 24 \
      --out $OUT/decode
  run g70b 50 $R -m benchmarks.decode --shape 70b --batch 16 --mode graph --pairs 7 \
      --steps 24 --out $OUT/decode
  grep -h "ms/token" $OUT/g*.log | cut -c1-260 >> $OUT/summary.txt
fi
if has eager; then
  run e70b 60 $R -m benchmarks.decode --shape 70b --batch 1 --mode eager --pairs 15 \
      --steps 24 --out $OUT/decode
  grep -h "ms/token" $OUT/e70b.log | cut -c1-260 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
