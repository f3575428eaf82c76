"""The models benchmarks/moe.py runs: a stack of mixture-of-experts blocks (x + MoE(norm(x))),
experts spread over every rank (expert parallelism over the whole group).

- DeepSpeed-MoE (`deepspeed.moe.layer.MoE`, ep_size = ranks): top-k gating with a capacity
  factor (dispatch and combine as equal-split all-to-alls padded to the capacity), or
  drop_tokens=False (DeepSpeed's drop-less: the capacity is the largest count over ranks,
  agreed by an all-reduce MAX, still equal splits).
- `uneven`: a drop-less layer whose dispatch and combine send each peer exactly the tokens
  routed to its experts (uneven all_to_all_single, split sizes exchanged first), as
  drop-less MoE codebases do. Its calls go through deepspeed.comm too, so the same switch
  sends them to DeepSpeed's, mcr's or no communication.
Every layer is deterministic (no random token selection, no sampled second expert): two
configurations given the same inputs must give the same losses.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

# hidden, ffn (each expert's), layers, experts a rank
SHAPES = {"tiny": {"hidden": 32, "ffn": 64, "layers": 2, "experts": 2},
          "medium": {"hidden": 1024, "ffn": 2816, "layers": 4, "experts": 2},
          "large": {"hidden": 4096, "ffn": 14336, "layers": 4, "experts": 2}}
CAPACITIES = ("1.0", "1.25", "dropless", "uneven")


def _ds_comm() -> Any:
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
    import deepspeed.comm as ds_comm
    return ds_comm


class _AllToAll(torch.autograd.Function):
    """Uneven all_to_all_single through deepspeed.comm; its gradient goes back the same way."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        ctx.send, ctx.recv = send, recv
        out = x.new_empty((sum(recv), *x.shape[1:]))
        _ds_comm().all_to_all_single(out, x.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        out = grad.new_empty((sum(ctx.send), *grad.shape[1:]))
        _ds_comm().all_to_all_single(out, grad.contiguous(), ctx.send, ctx.recv)
        return out, None, None


def _expert(hidden: int, ffn: int) -> nn.Module:
    return nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))


class UnevenMoE(nn.Module):
    """Top-k drop-less MoE: every routed token reaches its expert, none padded."""

    def __init__(self, hidden: int, ffn: int, local: int, world: int, rank: int, k: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, local * world, bias=False)
        self.experts = nn.ModuleList(_expert(hidden, ffn) for _ in range(local))
        self.local, self.world, self.rank, self.k = local, world, rank, k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output, auxiliary loss: none here)."""
        weight, chosen = self.gate(x).float().softmax(-1).topk(self.k, dim=-1)
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // self.k
        send = torch.bincount(flat[order] // self.local, minlength=self.world)
        recv = torch.empty_like(send)
        _ds_comm().all_to_all_single(recv, send)
        send_l, recv_l = send.tolist(), recv.tolist()
        got = _AllToAll.apply(x[token], send_l, recv_l)
        which = torch.empty(sum(recv_l), dtype=flat.dtype, device=x.device)
        _ds_comm().all_to_all_single(which, flat[order].contiguous(), recv_l, send_l)
        out = torch.zeros_like(got)
        for i, expert in enumerate(self.experts):
            rows = (which == self.rank * self.local + i).nonzero().squeeze(1)
            out = out.index_copy(0, rows, expert(got[rows]))
        back = _AllToAll.apply(out, recv_l, send_l)
        w = weight.reshape(-1)[order].to(x.dtype).unsqueeze(1)
        return torch.zeros_like(x).index_add(0, token, back * w), x.new_zeros((), dtype=torch.float)


class Block(nn.Module):
    """x + MoE(LayerNorm(x))."""

    def __init__(self, shape: dict[str, int], world: int, rank: int, k: int, capacity: str
                 ) -> None:
        super().__init__()
        h, ffn, local = shape["hidden"], shape["ffn"], shape["experts"]
        self.norm = nn.LayerNorm(h)
        if capacity == "uneven":
            self.moe: nn.Module = UnevenMoE(h, ffn, local, world, rank, k)
            self.deepspeed = False
        else:
            _ds_comm()
            from deepspeed.moe.layer import MoE
            cf = 1.0 if capacity == "dropless" else float(capacity)
            self.moe = MoE(h, _expert(h, ffn), num_experts=local * world, ep_size=world, k=k,
                           capacity_factor=cf, eval_capacity_factor=cf, min_capacity=4,
                           drop_tokens=capacity != "dropless", use_rts=False,
                           top2_2nd_expert_sampling=False)
            self.deepspeed = True

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output, auxiliary loss)."""
        if self.deepspeed:
            y, aux, _ = self.moe(self.norm(x))
        else:
            y, aux = self.moe(self.norm(x))
        return x + y, aux


class Stack(nn.Module):
    """`layers` MoE blocks, the same weights on every rank (seed 0; that experts of different
    ranks start equal changes nothing that is timed or compared)."""

    def __init__(self, shape: dict[str, int], world: int, rank: int, k: int, capacity: str,
                 device: torch.device, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(Block(shape, world, rank, k, capacity)
                                    for _ in range(shape["layers"]))
        if capacity != "uneven":
            for b in self.blocks:
                b.moe.set_deepspeed_parallelism()
        self.to(device, dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output, summed auxiliary loss)."""
        aux = x.new_zeros((), dtype=torch.float)
        for b in self.blocks:
            x, a = b(x)
            aux = aux + a
        return x, aux
