#!/usr/bin/env bash
# 2026-11-28, fifth session, call 4 (2x H200; DeepSpeed as wheels, carry .whl):
#   tune  the shipped 2x H200 table resumed from its CSV once more: the overlap profile now
#         measures all-to-alls beside a GEMM (its new default --overlap-ops)
#   moe   benchmarks.moe decode, 16 and 64 tokens, capacity 1.0 and drop-less, 15 pairs
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-560}; PARTS=${PARTS:-tune moe}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if has tune; then
  mkdir -p $OUT/tune
  cp tuning_tables/nvidia-h200_np2.csv $OUT/tune/nvidia-h200_np2.partial.csv
  run tune 300 python3 -m mcr.tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
      --backend nccl,sdma,sdma_pipe,symm,mpi --symm sdma --profiles standalone,overlap \
      --interconnect NVLink --out $OUT/tune/nvidia-h200_np2
  grep -h "replayed\|wrote\|Error" $OUT/tune.log | tail -4 >> $OUT/summary.txt
  grep -A30 "all_to_all overlap" $OUT/tune/nvidia-h200_np2.yaml | head -34 >> $OUT/summary.txt
fi
if has moe; then
  run moe 200 $R -m benchmarks.moe --shape large --tokens 16,64 --k 2 \
      --capacity 1.0,uneven --step decode --pairs 15 --out $OUT/moe
  grep -h "x \[\|waited\|Error" $OUT/moe.log | head -20 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
