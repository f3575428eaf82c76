"""A tiny random-init HF Llama loaded with `tp_plan="auto"` (transformers starts
torch.distributed itself) generates greedy tokens; with `mcr` as the first argument the mcr
backend is installed first, so transformers' own init_process_group starts it. Each rank prints
its tokens; rank 0 of an mcr run the summary.

    torchrun --nproc_per_node=2 tests/workers/hf_tp_worker.py mcr CHECKPOINT_DIR
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import torch_env_from_mpi  # noqa: E402

if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    if mode != "mcr":      # mcr's install() states the MPI launcher's ranks for transformers
        torch_env_from_mpi()
    if mode == "mcr":
        from mcr.integrations import torch_backend
        torch_backend.install()
    import torch.distributed as tdist
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", dtype=torch.float32)
    assert tdist.get_backend() == ("mcr" if mode == "mcr" else "gloo"), tdist.get_backend()
    prompt = torch.arange(3, 11).view(1, 8)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=12, do_sample=False)
    rank = tdist.get_rank()
    if mode == "mcr" and rank == 0:
        import mcr.comm as dist
        dist.log_summary()
    print(f"rank {rank}: TOKENS {mode} {out[0, 8:].tolist()}", flush=True)
    tdist.destroy_process_group()
