#!/usr/bin/env bash
# 2026-11-27 (fifth session), issue 53 on 4x H200, 466 s of device time left: does
# destroy_process_group() return after graph capture (plain NCCL, mcr sent to NCCL, mcr), then
# torch.compile through the backend (TP, inductor), losses against plain NCCL, then FSDP2
# through the backend with a fourth copy sent to NCCL. Parts past the deadline are skipped.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
T0=$(date +%s); DEADLINE=${DEADLINE:-270}
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
. lab/scripts/parts.sh
F=$(python3 -c 'import torch.distributed.distributed_c10d as c; print(c.__file__)')
sed -n 2300,2325p $F > $OUT/c10d_2300.txt
for v in plain mcr_nccl mcr; do
  run destroy_$v 45 $R lab/probes/destroy_after_capture.py $v
  grep -h "DESTROYED\|File\|Timeout\|Error" $OUT/destroy_$v.log 2>/dev/null | sort | uniq -c \
    | head -12 >> $OUT/summary.txt
done
for be in nccl mcr; do
  run compile_tpc 90 $R tests/workers/torch_backend_worker.py tpc $be cuda
done
grep -ho "rank [0-9]*: LOSSES.*\|rank [0-9]*: COMPILED.*\|[A-Za-z]*Error.*" $OUT/compile_tpc.log \
  2>/dev/null | sed 's/ \(nccl\|mcr\) \[/ [/' | cut -c1-140 | sort | uniq -c >> $OUT/summary.txt
grep -h -A8 "mcr summary" $OUT/compile_tpc.log 2>/dev/null | head -10 >> $OUT/summary.txt
run fsdp 120 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 11 --mcr-nccl
grep -h "RESULT" $OUT/fsdp.log 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    d = json.loads(l[7:])
    for k, v in d.items():
        v.pop("blocks", None); print(k, json.dumps(v))' >> $OUT/summary.txt
grep -h -A12 "mcr summary" $OUT/fsdp.log 2>/dev/null | head -12 >> $OUT/summary.txt
cat $OUT/summary.txt
