#!/usr/bin/env bash
# 2026-11-28, sixth session, call 1 (4x H200): programmatic dependent launch for symm's
# low-latency kernel (MCR_SYMM_PDL), then the 4-GPU table resumed with the all-to-all curves
# added since it was tuned (uneven splits; beside a GEMM).
#   quick   fast_worker --quick with MCR_SYMM_PDL=1 (every GPU path against NCCL)
#   pdl     probe_ll_variants PARTS=pdl: the kernel plain vs early, bare and between GEMMs
#   decode  benchmarks.decode 8B batch 1,16 and 70B slice batch 1, graph, PDL on and off
#   tune    the shipped 4x table resumed from its own CSV (partial CSV comes back if cut)
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-585}; PARTS=${PARTS:-quick pdl decode tune}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MCR_STALL_S=10
if has quick; then
  run quick 90 env MCR_SYMM_PDL=1 MCR_SUMMARY=1 $R tests/workers/fast_worker.py --quick
  grep -h "OK\|FAIL\|Error\|PDL" $OUT/quick.log | cut -c1-200 | head -8 >> $OUT/summary.txt
fi
if has pdl; then
  PARTS=pdl run pdl 90 $R -m lab.probes.probe_ll_variants
  grep -h "^ \|GPU us\|Error" $OUT/pdl.log | cut -c1-400 >> $OUT/summary.txt
fi
if has decode; then
  for p in 1 0; do
    run d8b_pdl$p 60 env MCR_SYMM_PDL=$p $R -m benchmarks.decode --shape 8b --batch 1,16 \
        --mode graph --pairs 7 --steps 24 --out $OUT/decode_pdl$p
    run d70b_pdl$p 45 env MCR_SYMM_PDL=$p $R -m benchmarks.decode --shape 70b --batch 1 \
        --mode graph --pairs 7 --steps 24 --out $OUT/decode_pdl$p
  done
  grep -H "ms/token\|x \[" $OUT/d*_pdl*.log | cut -c1-240 >> $OUT/summary.txt
fi
if has tune; then
  mkdir -p $OUT/tune
  cp tuning_tables/nvidia-h200_np4.csv $OUT/tune/nvidia-h200_np4.partial.csv
  left=$(( DEADLINE - $(date +%s) + T0 - 15 ))
  run tune $left python3 -m tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
      --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
      --interconnect NVLink --out $OUT/tune/nvidia-h200_np4
  grep -h "replayed\|wrote\|Error" $OUT/tune.log | tail -4 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
