#!/usr/bin/env bash
# 2026-12-08, 1x GPU: issue 52's special values on GPU paths as far as one GPU shows them
# (symm's low-latency kernel as 2 and 4 streams of one GPU; the matrix through NCCL, MPI, sdma,
# symm and auto at one rank), then the CPU stand-in host cost on a GPU host, then the GPU tier.
# Predictions: both special-value tests pass; host cost sync +0.9-1.6 us, async+wait +1.7-3 us
# over torch; every GPU test that runs passes (2+ GPU tests skip).
set -u
source lab/scripts/parts.sh
packed_call
T0=$(date +%s); DEADLINE=${DEADLINE:-540}
run special 150 python3 -m pytest -q -p no:cacheprovider -rs \
    tests/test_symm_ll_gpu.py tests/test_api.py -k special
tail -6 $OUT/special.log >> $OUT/summary.txt
for i in 1 2; do
  run host_cost 60 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
      -m benchmarks.dispatch_overhead
done
grep -A6 "no-op" $OUT/host_cost.log >> $OUT/summary.txt
run gpu_tier 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -rs \
    --deselect tests/test_api.py::test_special_values_give_torchs_answer_on_every_gpu_path
tail -25 $OUT/gpu_tier.log >> $OUT/summary.txt
