#!/usr/bin/env bash
# 1x H200 (the only kind lent), 2026-11-29, call 1: symm's low-latency kernels, the new
# all-to-all with split sizes among them, run for real with 2-4 ranks as streams of one
# process on one GPU (tests/test_symm_ll_gpu.py), the uneven form through mcr's whole path on
# one rank, and the GPU tests of the symm modules. Packed into $OUT/all.tgz.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-420}
. lab/scripts/parts.sh
packed_call
run ll_gpu 240 python3 -m pytest -q -p no:cacheprovider -rs tests/test_symm_ll_gpu.py
tail -4 $OUT/ll_gpu.log >> $OUT/summary.txt
run uneven_one 90 python3 -m torch.distributed.run --standalone --nproc_per_node=1 \
    lab/probes/symm_uneven_one.py
grep -h "rows\|ALL OK\|MISMATCH\|symm, group\|Error" $OUT/uneven_one.log >> $OUT/summary.txt
run gpu_tests 200 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/test_fast.py \
    tests/test_symm.py tests/test_symm_uneven.py tests/test_dispatcher.py
tail -4 $OUT/gpu_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
