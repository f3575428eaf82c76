"""A new user's FSDP2 run through Hugging Face's Trainer (as run on 1x H100, 2026-11-24).

A 2-layer Llama from random init, bf16, `fsdp_config={"version": 2}`, 4 steps; rank 0 prints
the losses, what the model became and whether fully_shard was mcr's (MCR_FSDP=1's hook).
"""

import os
import sys
import tempfile

import torch
import torch.distributed.fsdp as fsdp
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(Dataset):
    """64 samples of 32 random tokens, the same on every run."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": x, "labels": x}


torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4, max_steps=4, logging_steps=1,
    report_to=[], bf16=True, save_strategy="no", dataloader_num_workers=0, seed=0, fsdp=True,
    fsdp_config={"version": 2, "reshard_after_forward": True,
                 "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
trainer = Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=Tokens())
trainer.train()
if int(os.environ.get("RANK", 0)) == 0:
    model = trainer.model_wrapped
    print("LOSSES", [round(h["loss"], 6) for h in trainer.state.log_history if "loss" in h])
    print("MODEL", type(model).__mro__[:3], "fully_shard wrapped:",
          hasattr(fsdp.fully_shard, "__mcr_wrapped__"), "is_fsdp", trainer.is_fsdp_enabled,
          "fsdp2 modules", sum(isinstance(m, fsdp.FSDPModule) for m in model.modules()))
    print("mcr mods", sorted(m for m in sys.modules if m.startswith("mcr")))
