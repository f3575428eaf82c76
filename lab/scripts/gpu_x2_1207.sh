#!/usr/bin/env bash
# 2x H200 (2026-12-07): DDP on the mcr backend with NCCL's own futures handed to DDP (no Python
# future, whose value torch pickled twice a bucket), before (67c9287, lab/tmp_old/) and after,
# at a host-bound shape (hidden 1024, 16 layers, batch 1) and at the probe's default shape
# (GPU-bound, 11-29: 0.992x [0.990-0.999] and 1.0006x [0.982-1.051]); the backend's GPU test.
# Predictions: host-bound: old 0.93-0.97x of plain NCCL's step, new 0.98-1.01x; default shape
# new 0.99-1.01x; the GPU test passes (DDP, FSDP2, TP at 2 ranks bit for bit).
# Before the call, here (lab/tmp_old/ stays untracked; the device copies it):
#   mkdir -p lab/tmp_old && git archive 67c9287 mcr benchmarks tests lab/probes tuning_tables \
#     | tar -x -C lab/tmp_old && cp benchmarks/backend_overhead.py lab/tmp_old/benchmarks/
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
OLD=$PWD/lab/tmp_old
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
in_tree() { local v=$1; shift; if [ $v = old ]; then (cd $OLD && PYTHONPATH=$OLD:$OLD/lab/probes "$@");
            else "$@"; fi; }
for v in new old old new; do
  in_tree $v run ddp_small_$v 110 $R lab/probes/ddp_fsdp_backend.py --what ddp --hidden 1024 \
      --layers 16 --batch 1 --rounds 9 --steps 5
  grep -h "RESULT" $OUT/ddp_small_$v.log | cut -c1-400 >> $OUT/summary.txt
done
run ddp_default 130 $R lab/probes/ddp_fsdp_backend.py --what ddp --rounds 15
grep -h "RESULT" $OUT/ddp_default.log | cut -c1-400 >> $OUT/summary.txt
run gpu_test 150 python3 -m pytest -q -m gpu tests/test_torch_backend.py -p no:cacheprovider
run overhead 60 $R -m benchmarks.backend_overhead -d cuda --rounds 40
