"""FSDP2 through mcr, saved and loaded with torch.distributed.checkpoint (DCP).

Train 3 steps, save model and optimizer state with DCP (argv[1] is the folder), train 3 more;
build a new copy, load the save into it and train the same 3 steps: the losses must repeat.
DCP's own object collectives go to torch and are counted as bypassing mcr. Prints
`rank R: CHECKPOINT OK`.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import mcr.comm as dist
import mcr.integrations.fsdp as mcr_fsdp

dist.init_distributed(verbose=False)
rank = dist.get_rank()


def build() -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 16))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    assert mcr_fsdp.install(model) == 2
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def steps(model: torch.nn.Module, opt: Any, first: int, n: int) -> list[float]:
    losses = []
    for step in range(first, first + n):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x, y = torch.randn(8, 32, generator=g), torch.randn(8, 16, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


model, opt = build()
steps(model, opt, 0, 3)
msd, osd = get_state_dict(model, opt)
dcp.save({"model": msd, "optim": osd}, checkpoint_id=sys.argv[1])
on = steps(model, opt, 3, 3)
again, opt2 = build()
msd, osd = get_state_dict(again, opt2)
state = {"model": msd, "optim": osd}
dcp.load(state, checkpoint_id=sys.argv[1])
set_state_dict(again, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
resumed = steps(again, opt2, 3, 3)
assert resumed == on, f"rank {rank}: losses after loading differ: {on} vs {resumed}"
rows = dist.log_summary(return_dict=True)
assert {r["op"] for r in rows if r["kind"] == "served"} >= {"all_gather", "reduce_scatter"}, rows
print(f"rank {rank}: CHECKPOINT OK", flush=True)
dist.destroy_process_group()
