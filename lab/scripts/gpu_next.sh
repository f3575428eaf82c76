#!/usr/bin/env bash
# Ready for the next session's device time (2x or 4x), one call, parts past DEADLINE skipped,
# everything packed into $OUT/all.tgz at exit (a call brings back 8 files at most):
#   hang     moe.py's drop-less (uneven) decode with symm serving all-to-all (MCR_SYMM_OPS
#            with all_to_all, the 2x H200 re-tune from lab/results as the table): where the
#            2026-11-28 hang sits; faulthandler dumps every rank's Python stack at 60 s
#   uneven   lab/probes/uneven_gpu.py, then moe.py's uneven decode on the shipped tables (the
#            split check now through the board): is it >= 1.00x now?
#   hf       HF tp_plan decode eager in short blocks and captured (issue 53)
# PARTS picks (default all). DeepSpeed travels as wheels (.whl, git-ignored; carry=[".whl"]),
# the call's command starting with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}; PARTS=${PARTS:-hang uneven hf}
. lab/scripts/parts.sh
packed_call
if has hang; then
  MCR_SYMM_OPS=all_reduce,all_gather,reduce_scatter,broadcast,all_to_all \
  MCR_TUNING_TABLE=$PWD/lab/results/2026-11-28_h200x2_a2a/tune/nvidia-h200_np2.yaml \
  MCR_STALL_S=5 MCR_TIMEOUT_S=40 MCR_LAB_TRACE=$OUT/trace \
  run hang 90 $R lab/probes/faulthandler_run.py 30 -m benchmarks.moe \
      --shape large --tokens 64 --k 2 --capacity uneven --step decode --pairs 3
  grep -h "waited\|File \|Thread\|Current\|x \[" $OUT/hang.log | head -60 >> $OUT/summary.txt
  tail -n 12 $OUT/trace.rank* >> $OUT/summary.txt
fi
if has uneven; then
  run uneven 40 $R lab/probes/uneven_gpu.py
  grep -h "UNEVEN" $OUT/uneven.log >> $OUT/summary.txt
  run moe_uneven 170 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
      --capacity uneven --step decode --pairs 5 --out $OUT/moe
  grep -h "x \[\|waited" $OUT/moe_uneven.log >> $OUT/summary.txt
fi
if has hf; then
  run make 120 python3 lab/probes/hf_tp_graph.py make /tmp/hf8b 8
  run hf 240 $R lab/probes/hf_tp_graph.py /tmp/hf8b --batches 1 --rounds 7 --reps 30 \
      --eager-rounds 30 --eager-reps 5
  grep -h "RESULT" $OUT/hf.log | cut -c1-1500 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
