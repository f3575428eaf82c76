#!/usr/bin/env bash
# 2x H200 (4x not lent), call 1 of the 2026-11-28's session: symm's low-latency all-to-all checked
# against NCCL and timed (OSU, eager and in a graph), FSDP2 through the backend with a profile
# of each copy, then the 2-GPU table re-tuned (all ops: symm now serves all-to-all) and
# checked. Parts past DEADLINE are skipped.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s); DEADLINE=${DEADLINE:-560}
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
. lab/scripts/parts.sh
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N commit $(git rev-parse --short HEAD 2>/dev/null)" > $OUT/summary.txt
run symm_check 90 $R tests/workers/fast_worker.py --symm-only
grep -h "symm:\|FAIL\|Error\|checks" $OUT/symm_check.log | head -8 >> $OUT/summary.txt
B="-d cuda -t bfloat16 -m 8:2MiB -f 4 --backend nccl,symm --rounds 3"
run osu_a2a 60 $R -m benchmarks.osu_alltoall $B -i 50 -x 5 -c --max-seconds 0.3 --csv $OUT/osu_a2a.csv
run osu_a2a_graph 60 $R -m benchmarks.osu_alltoall $B -i 10 -x 2 --batch 20 --graph --csv $OUT/osu_a2a_graph.csv
grep -h "^ " $OUT/osu_a2a.log $OUT/osu_a2a_graph.log >> $OUT/summary.txt
run fsdp 150 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 9 --mcr-nccl --profile $OUT/prof
grep -h "RESULT" $OUT/fsdp.log | cut -c1-1500 >> $OUT/summary.txt
mkdir -p /tmp/t
run tune 260 python3 -m tuner -d cuda -t bfloat16 -m 4:1GiB --batch 5 \
    --backend nccl,sdma,sdma_pipe,symm --symm sdma --profiles standalone,overlap \
    --interconnect NVLink --out /tmp/t/nvidia-h200_np2 --fresh
cp /tmp/t/nvidia-h200_np2* $OUT/ 2>/dev/null
python3 -m tuner show /tmp/t/nvidia-h200_np2.yaml > $OUT/show.txt 2>&1
grep -A12 "all_to_all" $OUT/show.txt | head -30 >> $OUT/summary.txt
run check 150 python3 -m tuner check /tmp/t/nvidia-h200_np2.yaml -d cuda -t bfloat16 \
    -m 4:1GiB --batch 5 --backend nccl,sdma,sdma_pipe,symm --symm sdma
tail -14 $OUT/check.log >> $OUT/summary.txt
cat $OUT/summary.txt
