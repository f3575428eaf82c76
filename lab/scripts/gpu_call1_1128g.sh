#!/usr/bin/env bash
# 1x H200 (the only kind lent), 2026-11-28 seventh session, call 1: the host cost of
# all_to_all_single with equal splits before and after its short path (this host's CPU, 2
# Gloo ranks, the no-op stand-in; old tree's collectives.py carried in .whl/old, blocks
# alternated old/new/new/old), then the tests that need one GPU. Packed into $OUT/all.tgz.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-500}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp mcr/collectives.py /tmp/new_collectives.py
for v in old new new old old new; do
  if [ $v = old ]; then cp .whl/old/collectives.py mcr/collectives.py; else cp /tmp/new_collectives.py mcr/collectives.py; fi
  echo "== $v" >> $OUT/a2a_host.log
  run a2a_host 60 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      -m benchmarks.dispatch_overhead --op all_to_all --rounds 30
done
cp /tmp/new_collectives.py mcr/collectives.py
grep -h "^==\|  mcr " $OUT/a2a_host.log | grep -v summary >> $OUT/summary.txt
run ar_host 60 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
    -m benchmarks.dispatch_overhead --rounds 30
grep -h "  mcr " $OUT/ar_host.log | tail -3 >> $OUT/summary.txt
run gpu_tests 300 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_fast.py \
    tests/test_hier.py tests/test_lanes.py tests/test_errors.py tests/test_dispatcher.py \
    tests/test_fsdp_comm.py tests/test_measure.py
tail -5 $OUT/gpu_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
