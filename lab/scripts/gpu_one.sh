#!/usr/bin/env bash
# What a one-GPU machine can check (run from the repo root; logs to $OUT): the gpu-marked tests
# that need one GPU (the others skip), and the FSDP2 integration worker on CPU tensors under this
# machine's torch (FSDP2's internals differ between torch versions), flat and HSDP, 4 ranks.
set -uo pipefail
. lab/scripts/gpu_env.sh
{
echo "# device run $(date -Iseconds) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N, commit ${COMMIT:-?}"
python3 -c 'import torch, mpi4py; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "mpi4py", mpi4py.__version__)'
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -15
cd tests/workers
for extra in "" "--hsdp --async --divide 4"; do
  echo "== fsdp_worker $extra (CPU tensors, 4 ranks, torchrun)"
  timeout 200 torchrun --standalone --nproc_per_node=4 fsdp_worker.py --steps 10 $extra 2>&1 \
    | grep -E "FSDP OK|served|Error|error" | grep -v Warn | tail -6
done
} 2>&1 | tee "$OUT/one_gpu.log"
