#!/usr/bin/env bash
# 2x GPUs, the 2026-11-28 second session, call 3: why FSDP2 through the mcr backend runs at
# 0.91-0.96x: the same steps on a minimal Python process group that hands each call to the
# plain NCCL group (torch's Python-backend cost alone), mcr sent to NCCL, cProfile and
# torch.profiler of one block of each copy; then HF tp_plan decode batch 1 and 16, graph and
# eager. Packed into $OUT/all.tgz at exit.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-500}
. lab/scripts/parts.sh
packed_call
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
run fsdp 240 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 9 --mcr-nccl --passthru \
    --cprofile $OUT/cprof --profile $OUT/prof
grep -h "RESULT" $OUT/fsdp.log | cut -c1-1200 >> $OUT/summary.txt
run make 60 python3 lab/probes/hf_tp_graph.py make /tmp/hf8b 8
run hf 180 $R lab/probes/hf_tp_graph.py /tmp/hf8b --batches 1,16 --rounds 7 --reps 30 \
    --eager-rounds 30 --eager-reps 5
grep -h "RESULT" $OUT/hf.log | cut -c1-3000 >> $OUT/summary.txt
cat $OUT/summary.txt
