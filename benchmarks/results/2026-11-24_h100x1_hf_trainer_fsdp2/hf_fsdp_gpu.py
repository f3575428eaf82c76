import os, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from torch.utils.data import Dataset

class DS(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 128, (32,), generator=g)
        return {"input_ids": x, "labels": x}

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
model = LlamaForCausalLM(cfg)
args = TrainingArguments(output_dir="/tmp/nu/out", per_device_train_batch_size=4, max_steps=4,
                         logging_steps=1, report_to=[], use_cpu=False, bf16=True, save_strategy="no",
                         fsdp=True, fsdp_config={"version": 2, "fsdp_version": 2, "reshard_after_forward": True,
                         "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]},
                         dataloader_num_workers=0, seed=0)
tr = Trainer(model=model, args=args, train_dataset=DS())
tr.train()
if int(os.environ.get("RANK", 0)) == 0:
    print("LOSSES", [round(h["loss"], 6) for h in tr.state.log_history if "loss" in h])
if int(os.environ.get("RANK", 0)) == 0:
    import torch.distributed.fsdp as f
    print("MODEL", type(tr.model_wrapped).__mro__[:3], "fully_shard wrapped:", hasattr(f.fully_shard, "__mcr_wrapped__"),
          "is_fsdp", tr.is_fsdp_enabled, "fsdp2 modules", sum(type(m).__name__.startswith("FSDP") for m in tr.model_wrapped.modules()))
    print("mcr mods", sorted(m for m in sys.modules if m.startswith("mcr")))
