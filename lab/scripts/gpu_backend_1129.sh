#!/usr/bin/env bash
# 2026-11-29 (fourth session), 1x H200: the `mcr` backend's two fixes on a GPU, one rank
# (FSDP2 after register() alone; the group lists its devices, so DCP's async_save and a
# rank-0 broadcast of a full state dict work), the one-GPU tests, and the host cost of
# async+wait on this host's CPU (no-op stand-in for Gloo).
# Predictions: every LOSSES pair equal (ws 1: any arithmetic difference would be mcr's);
# ckpt's three 2-step runs repeat; -m gpu 15 passed (14 + none new), 9 skipped; host cost
# sync ~1.5 us, async+wait ~2.5-3 us over torch (this host's Python is slower than the CI box's).
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
W=tests/workers/torch_backend_worker.py
for what in ddp fsdp tp tpcg ckpt; do
  plain=nccl; [ $what = ckpt ] && plain=cpu:gloo,cuda:nccl
  for be in $plain mcr $([ $what = fsdp ] && echo reg); do
    run ${what}_${be//[:,]/_} 150 $R $W $what $be cuda $OUT/ckpt_${be//[:,]/_}
  done
done
grep -h "LOSSES\|COMMS\|COMPILED" $OUT/*.log | sort > $OUT/losses.txt
run gpu_tests 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider
run host_cost 120 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    -m benchmarks.dispatch_overhead --rounds 100
