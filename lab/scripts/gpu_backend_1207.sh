#!/usr/bin/env bash
# 2026-12-07, 1x H200: the `mcr` backend's host time a DDP bucket on a GPU, before (67c9287,
# carried in lab/tmp_old/) and after (this tree: the library's own future handed on, no
# Python future; the host path's decision cached), one rank.
# Predictions: backend_overhead -d cuda, DDP bucket on mcr minus on nccl: old +30-45 us (two
# pickles of the future's value, ~10 us each on this host, plus the Python layer), new +5-15 us;
# DDP probe at host-bound shapes (hidden 1024, 16 layers, batch 1): mcr/nccl old 0.90-0.95x,
# new 0.97-1.00x of nccl's step; the backend's GPU test (DDP, FSDP2, TP against plain NCCL,
# bit for bit at one rank) passes.
# Before the call, here (lab/tmp_old/ stays untracked; the device copies it):
#   mkdir -p lab/tmp_old && git archive 67c9287 mcr benchmarks tests lab/probes tuning_tables \
#     | tar -x -C lab/tmp_old && cp benchmarks/backend_overhead.py lab/tmp_old/benchmarks/
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-450}
# python -m puts the working folder first on sys.path: the old tree runs from its own folder.
TOP=$PWD OLD=$PWD/lab/tmp_old
export PYTHONPATH=$PYTHONPATH:$PWD/lab/probes
in_tree() { local v=$1; shift; if [ $v = old ]; then (cd $OLD && PYTHONPATH=$OLD:$OLD/lab/probes "$@");
            else "$@"; fi; }
for v in new old old new; do
  in_tree $v run overhead_$v 100 $R -m benchmarks.backend_overhead -d cuda --rounds 40
done
for v in new old old new; do
  in_tree $v run ddp_$v 120 $R lab/probes/ddp_fsdp_backend.py --what ddp --hidden 1024 \
      --layers 16 --batch 1 --rounds 9 --steps 5
  grep -h "RESULT" $OUT/ddp_$v.log | cut -c1-400 >> $OUT/summary.txt
done
run gpu_test 200 python3 -m pytest -q -m gpu tests/test_torch_backend.py -p no:cacheprovider
