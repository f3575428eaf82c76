#!/usr/bin/env bash
# 2x H200 (2026-11-29, third session), with symm's uneven all-to-all on by default and the
# re-tuned 2x table: DeepSpeed-MoE decode (drop-less and capacity 1.0, 16 and 64 tokens a
# rank, top-2) and the training step at 4096 tokens, as shipped (no MCR_ variable), 9 pairs;
# fast_worker --quick first. Predictions: check OK; decode drop-less 1.14-1.16x (as with
# MCR_SYMM_OPS set), capacity 1.0 1.08-1.10x (11-28: 1.10x / 1.08x); training 4096 1.00-1.05x.
# Added in the fourth session: the backend's DCP checkpoint (ckpt) and FSDP2 after register()
# alone with "cpu:gloo,cuda:mcr" (regmix) on N GPUs, against plain: losses equal.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-400}
. lab/scripts/parts.sh
packed_call
deepspeed_wheels
run quick 60 $R tests/workers/fast_worker.py --quick
grep -ah "OK\|FAIL\|Error" $OUT/quick.log | cut -c1-200 | head -4 >> $OUT/summary.txt
W=tests/workers/torch_backend_worker.py
run ckpt_plain 40 $R $W ckpt cpu:gloo,cuda:nccl cuda $OUT/ck_plain
run ckpt_mcr 40 $R $W ckpt mcr cuda $OUT/ck_mcr
run fsdp_plain 30 $R $W fsdp nccl cuda
run fsdp_regmix 30 $R $W fsdp regmix cuda
rm -rf $OUT/ck_*
grep -ah "LOSSES" $OUT/ckpt_*.log $OUT/fsdp_*.log | sort | cut -c1-200 >> $OUT/summary.txt
M="-m benchmarks.moe --shape large --k 2 --pairs 9"
run moe_decode 110 $R $M --tokens 16,64 --capacity uneven,1.0 --step decode --out $OUT/moe_decode
run moe_train 110 $R $M --tokens 4096 --capacity 1.0 --step train --out $OUT/moe_train
grep -aH "x \[\|Error" $OUT/moe_*.log | cut -c1-300 | head -12 >> $OUT/summary.txt
cat $OUT/summary.txt
