"""HF tp_plan="auto" decode, plain NCCL or the mcr backend (one per process): ms per token at
batch 1 and 16, eager, after warm-up. Writes a random-init checkpoint first if it is missing.

    torchrun --nproc_per_node=N lab/probes/hf_tp_decode.py {nccl|mcr} CKPT [layers]
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

mode, path = sys.argv[1], sys.argv[2]
layers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rank = int(os.environ.get("RANK", "0"))
if mode == "make":
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                      max_position_embeddings=2048, torch_dtype="bfloat16")
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(path)
    sys.exit(0)
if mode == "mcr":
    from mcr.integrations import torch_backend
    torch_backend.install()
import torch.distributed as tdist  # noqa: E402 - after install(), which patches it
from transformers import AutoModelForCausalLM  # noqa: E402

model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", dtype=torch.bfloat16)
model.generation_config.pad_token_id = 0
out = {}
for batch in (1, 16):
    prompt = torch.randint(1, 32000, (batch, 32), device="cuda",
                           generator=torch.Generator("cuda").manual_seed(0))

    def gen(n: int) -> float:
        """Seconds to generate n new tokens."""
        torch.cuda.synchronize()
        tdist.barrier()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    gen(8)
    per = sorted((gen(72) - gen(8)) / 64 * 1e3 for _ in range(3))
    out[batch] = per[1]
if rank == 0:
    print("RESULT " + json.dumps({"mode": mode, "ms_per_token": out}), flush=True)
    if mode == "mcr":
        import mcr.comm as dist
        dist.log_summary()
tdist.destroy_process_group()
