#!/usr/bin/env bash
# 2026-11-28, fifth session, call 2 (2x H200). DeepSpeed travels as wheels (carry .whl):
#   tune    the shipped 2x H200 table resumed from its own CSV with the uneven all-to-all pass
#           added (even rows replay; MPI joins the candidates for the new curve)
#   decode  benchmarks.decode 8b and 70b batch 1, graph and eager, every block its slowest rank's
#   moe     benchmarks.moe decode, drop-less (uneven) and capacity 1.0, slowest-rank blocks
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-560}; PARTS=${PARTS:-tune decode moe}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if has tune; then
  mkdir -p $OUT/tune
  cp tuning_tables/nvidia-h200_np2.csv $OUT/tune/nvidia-h200_np2.partial.csv
  run tune 240 python3 -m mcr.tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
      --backend nccl,sdma,sdma_pipe,symm,mpi --symm sdma --profiles standalone,overlap \
      --interconnect NVLink --out $OUT/tune/nvidia-h200_np2
  grep -h "replayed\|wrote\|Error" $OUT/tune.log | tail -4 >> $OUT/summary.txt
  grep -A40 "all_to_all uneven" $OUT/tune/nvidia-h200_np2.yaml | head -45 >> $OUT/summary.txt
fi
if has decode; then
  for s in 8b 70b; do
    run decode_$s 110 $R -m benchmarks.decode --shape $s --batch 1 --mode graph,eager \
        --pairs 7 --out $OUT/decode
  done
  grep -h "ms/token" $OUT/decode_*.log >> $OUT/summary.txt
fi
if has moe; then
  run moe 170 $R -m benchmarks.moe --shape large --tokens 16,64,256 --k 2 \
      --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
  grep -h "x \[\|waited\|Error" $OUT/moe.log | head -20 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
