#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 7: the reviewed tree's one-GPU symm tests (test_symm_ll_gpu after
# its review edits; test_symm_gpu with all_to_all_uneven).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-240}
. lab/scripts/parts.sh
packed_call
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run symm_tests 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_symm_ll_gpu.py \
    "tests/test_fast.py::test_symm_gpu"
tail -3 $OUT/symm_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
