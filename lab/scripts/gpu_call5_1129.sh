#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 5: every GPU test this one GPU can run (-m gpu), fast_worker's
# symm checks with all-to-alls with split sizes on symm among them (one rank: the kernel with
# no peers, through mcr's whole path under mpirun), after the backends' all_to_all took `even`.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run gpu_tests 500 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/
tail -15 $OUT/gpu_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
