#!/usr/bin/env bash
# 2x GPUs, call 4 of the 2026-11-28 session: the uneven all-to-all probe again after waits spin
# before yielding, and benchmarks/moe.py decode with uneven splits. Packed into $OUT/all.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
FINAL=$OUT; OUT=$OUT/w; mkdir -p $OUT
trap 'cp $OUT/summary.txt $FINAL/ 2>/dev/null; tar -czf $FINAL/all.tgz -C $OUT .' EXIT
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
. lab/scripts/parts.sh
echo "# $(date -Iseconds) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N" > $OUT/summary.txt
run uneven 40 $R lab/probes/uneven_gpu.py
grep -h "UNEVEN" $OUT/uneven.log >> $OUT/summary.txt
export MCR_TUNING_TABLE=$PWD/tuning_tables/nvidia-h200_np$N.yaml
run moe_uneven 170 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
    --capacity uneven --step decode --pairs 5 --out $OUT/moe
grep -h "x \[\|fallback" $OUT/moe_uneven.log >> $OUT/summary.txt
cat $OUT/summary.txt
