#!/usr/bin/env bash
# 2x H200 (2026-11-29, fourth session, call 2): issue 53's two borderline points again, with
# more rounds: FSDP2 on the mcr backend (direct comm objects) against plain NCCL, 21 rounds
# (third session: 1.016x [0.921-1.047] on 9); HF tp_plan decode (8B-like, 8 layers) batch 1
# and 16, in a CUDA graph (9 rounds x 30 replays) and eager (30 rounds x 5 steps).
# Predictions: FSDP2 1.00-1.03x, interval narrower than 9 rounds' but still around 1.0 (blocks
# swing 29-36 ms, host-bound); HF graph batch 1 1.05-1.07x (11-28: 1.045x and 1.066x), batch 16
# 1.03-1.06x; eager batch 1 1.1-1.3x.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-520}
. lab/scripts/parts.sh
packed_call
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run fsdp 200 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 21
grep -h "RESULT" $OUT/fsdp.log | cut -c1-600 >> $OUT/summary.txt
run make 60 python3 lab/probes/hf_tp_graph.py make /tmp/hf8b 8
run hf 200 $R lab/probes/hf_tp_graph.py /tmp/hf8b --batches 1,16 --rounds 9 --reps 30 \
    --eager-rounds 30 --eager-reps 5
grep -h "RESULT\|x \[" $OUT/hf.log | cut -c1-3000 >> $OUT/summary.txt
cat $OUT/summary.txt
