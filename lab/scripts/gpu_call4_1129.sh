#!/usr/bin/env bash
# 1x H200, 2026-11-29, call 4: tests/test_symm_ll_gpu.py again (call 3: worlds 2 and 4 passed;
# at 3 the reference's avg was one bit off the kernel's: torch divides by a Python number as a
# multiplication by its inverse), then the 1-GPU symm and dispatcher tests.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
. lab/scripts/parts.sh
packed_call
run ll_gpu 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_symm_ll_gpu.py
tail -4 $OUT/ll_gpu.log >> $OUT/summary.txt
cat $OUT/summary.txt
