"""A Hugging Face Trainer with DeepSpeed ZeRO-3 on CPU, as a user writes it, with no line of mcr.

A 2-layer Llama from random init, saved and loaded back with `from_pretrained` under the
ZeRO-3 config (deepspeed.zero.Init, as for a large model), 4 steps. Run once plain and once
with MCR_DEEPSPEED=1 (the test compares the two runs' losses); rank 0 writes them at full
precision as JSON to the file named by the last argument (a file, not stdout: once, in a
fresh-clone CI run, the printed line was missing from the pipe both ranks share with the
launcher, likely a long buffered write cut by the other rank's) and, with mcr, each rank prints
how many calls mcr served. Prints `rank R: HF OK`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

DS = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "gradient_clipping": "auto",
      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
saved = tempfile.mkdtemp()
LlamaForCausalLM(cfg).save_pretrained(saved)   # before the DeepSpeed config is in force
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         max_steps=4, logging_steps=1, report_to=[], save_strategy="no",
                         dataloader_num_workers=0, seed=0, deepspeed=DS, use_cpu=True)
# 64 samples of 32 random tokens, the same on every run
tokens = [torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
          for i in range(64)]
# With a ZeRO-3 config in force, from_pretrained makes the model under deepspeed.zero.Init
# (its parameters partitioned as they load), as for a model too large for one device.
model = LlamaForCausalLM.from_pretrained(saved)
assert hasattr(next(model.parameters()), "ds_id"), "from_pretrained did not partition"
trainer = Trainer(model=model, args=args,
                  train_dataset=[{"input_ids": x, "labels": x} for x in tokens])
trainer.train()
rank = int(os.environ["RANK"])
if rank == 0:
    # DeepSpeed's launcher puts --local_rank=N before the script's own arguments.
    with open(sys.argv[-1], "w") as f:
        json.dump([h["loss"] for h in trainer.state.log_history if "loss" in h], f)
mcr_ds = sys.modules.get("mcr.integrations.deepspeed")
if os.environ.get("MCR_DEEPSPEED") == "1":
    assert mcr_ds is not None and mcr_ds.installed(), "MCR_DEEPSPEED=1 did not install mcr"
    import mcr.comm as dist
    rows = dist.log_summary(return_dict=True)
    served = sum(r["count"] for r in rows if r["kind"] == "served")
    missed = {(r["backend"], r["op"]): r["count"] for r in rows if r["kind"] == "bypass"}
    # Accelerate gathers the loss for its logs with torch.distributed itself: not DeepSpeed's.
    assert set(missed) <= {("torch.distributed", "all_gather")}, missed
    assert served >= 0.9 * (served + sum(missed.values())), (served, missed)
    print(f"rank {rank}: SERVED {served}, bypassed {missed}", flush=True)
else:
    assert mcr_ds is None or not mcr_ds.installed(), "mcr installed without MCR_DEEPSPEED=1"
print(f"rank {rank}: HF OK", flush=True)
# torch's Gloo exit race: a Gloo thread dropping the last works' tensors while the interpreter
# finalizes aborts the process ("terminate called without an active exception"). mcr's teardown
# settles it when mcr is loaded; the plain run has no mcr, so it settles here (without this, 2
# of 50 plain runs aborted, with it 0 of 50).
time.sleep(0.2)
