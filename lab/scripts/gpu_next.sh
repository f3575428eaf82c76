#!/usr/bin/env bash
# Ready for the next session's device time (4x H200), one call, parts past DEADLINE skipped:
#   destroy  where destroy_process_group() hangs after capture (the probe says each stage)
#   moe      benchmarks/moe.py, large shape: decode-size forwards and training steps, top-2,
#            capacity 1.0 and uneven (issue 55's first GPU numbers)
#   hf       HF tp_plan decode eager in short blocks (30 x 5 steps) and captured (issue 53)
#   fsdp     FSDP2 through the backend, a copy sent to NCCL, 15 rounds (issue 53)
# PARTS picks (default all). Predictions go in lab/notes before the call. DeepSpeed travels as
# wheels (.whl, git-ignored; carry=[".whl"]), the call's command starting with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s); DEADLINE=${DEADLINE:-540}; PARTS=${PARTS:-destroy moe hf fsdp}
N=$(python3 -c 'import torch; print(torch.cuda.device_count())')
R="python3 -m torch.distributed.run --standalone --nproc_per_node=$N"
. lab/scripts/parts.sh
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
if has destroy; then
  for v in plain mcr; do
    run destroy_$v 50 $R lab/probes/destroy_after_capture.py $v
    grep -h "rank 0:\|File\|Timeout" $OUT/destroy_$v.log | head -14 >> $OUT/summary.txt
  done
fi
if has moe; then
  if python3 -c 'import deepspeed' 2>/dev/null; then
    run moe_decode 150 $R -m benchmarks.moe --shape large --tokens 64,256 --k 2 \
        --capacity 1.0,uneven --step decode --pairs 7 --out $OUT/moe
    run moe_train 150 $R -m benchmarks.moe --shape large --tokens 512,4096 --k 2 \
        --capacity 1.0,uneven --step train --pairs 7 --out $OUT/moe_train
    grep -h "ms/step" $OUT/moe_decode.log $OUT/moe_train.log >> $OUT/summary.txt
  else
    echo "moe skipped: DeepSpeed not installed (carry its wheel)" >> $OUT/summary.txt
  fi
fi
if has hf; then
  run make 120 python3 lab/probes/hf_tp_graph.py make /tmp/hf8b 8
  run hf 240 $R lab/probes/hf_tp_graph.py /tmp/hf8b --batches 1 --rounds 7 --reps 30 \
      --eager-rounds 30 --eager-reps 5
  grep -h "RESULT" $OUT/hf.log | cut -c1-1500 >> $OUT/summary.txt
fi
if has fsdp; then
  run fsdp 150 $R lab/probes/ddp_fsdp_backend.py --what fsdp --rounds 15 --mcr-nccl
  grep -h "RESULT" $OUT/fsdp.log | cut -c1-1200 >> $OUT/summary.txt
fi
cat $OUT/summary.txt
