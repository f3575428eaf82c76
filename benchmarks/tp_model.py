"""A Llama-style decoder sharded by hand for tensor parallelism, for decode.py.

Megatron's layout: attention heads and MLP columns split over the ranks, so each layer ends its
attention and its MLP with one all-reduce of batch x hidden; the vocabulary is split too, and
the logits of one step are all-gathered for the greedy token. KV cache and inputs are static
tensors, so one decode step can be captured in a CUDA graph and replayed, as serving engines do.
The communication is a pair of functions handed in (`Comm`): plain torch.distributed, mcr, or
nothing at all (the floor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

SHAPES = {
    # Llama-3-8B-like; a 16-layer slice of a 70B-like model; and one small enough for 2 CPU ranks.
    "8b": dict(hidden=4096, ffn=14336, layers=32, heads=32, kv_heads=8, vocab=32000),
    "70b": dict(hidden=8192, ffn=28672, layers=16, heads=64, kv_heads=8, vocab=32000),
    "tiny": dict(hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, vocab=128),
}


@dataclass
class Comm:
    """The collectives a step makes: all_reduce(t) in place (sum), all_gather(out, inp)."""

    name: str
    all_reduce: Callable[[torch.Tensor], object]
    all_gather: Callable[[torch.Tensor, torch.Tensor], object]


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, 1e-5)


class Weights:
    """This rank's shard of the model's weights (random, the same for every configuration)."""

    def __init__(self, shape: dict[str, int], rank: int, world: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        s = shape
        for what in ("heads", "kv_heads", "ffn", "vocab"):
            if s[what] % world:
                raise ValueError(f"decode: {what}={s[what]} does not split over {world} ranks")
        self.hd = s["hidden"] // s["heads"]
        self.hl, self.kvl = s["heads"] // world, s["kv_heads"] // world
        self.fl, self.vl = s["ffn"] // world, s["vocab"] // world
        self.world, self.device, self.dtype = world, device, dtype
        h = s["hidden"]
        g = torch.Generator(device=device).manual_seed(1234 + rank)

        def w(*size: int) -> torch.Tensor:
            return (torch.randn(*size, generator=g, device=device) * size[0] ** -0.5).to(dtype)
        # The embedding is replicated: every rank draws it from the same seed.
        e = torch.Generator(device=device).manual_seed(99)
        self.embed = torch.randn(s["vocab"], h, generator=e, device=device).to(dtype)
        self.layers = [dict(qkv=w(h, (self.hl + 2 * self.kvl) * self.hd),
                            o=w(self.hl * self.hd, h), gu=w(h, 2 * self.fl), down=w(self.fl, h),
                            n1=torch.ones(h, device=device, dtype=dtype),
                            n2=torch.ones(h, device=device, dtype=dtype))
                       for _ in range(s["layers"])]
        self.norm = torch.ones(h, device=device, dtype=dtype)
        self.head = w(h, self.vl)
        self.gen = g


class TPDecoder:
    """A batch's KV cache and static inputs over the shared weights, and one greedy decode
    step."""

    def __init__(self, wts: Weights, batch: int, prompt: int, steps: int) -> None:
        self.w = wts
        self.hd, self.hl, self.kvl, self.fl, self.vl = wts.hd, wts.hl, wts.kvl, wts.fl, wts.vl
        self.world, self.batch, self.prompt = wts.world, batch, prompt
        device, dtype, g = wts.device, wts.dtype, wts.gen
        t = prompt + steps
        # The prompt's keys and values as random numbers: decode costs the same whatever they
        # hold, and every configuration starts each block from the same cache.
        self.cache = [tuple(torch.randn(batch, self.kvl, t, self.hd, generator=g,
                                        device=device).to(dtype) for _ in "kv")
                      for _ in wts.layers]
        inv = 1.0 / 10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd)
        ang = torch.outer(torch.arange(t, dtype=torch.float32), inv).repeat(1, 2)
        self.cos, self.sin = ang.cos().to(device, dtype), ang.sin().to(device, dtype)
        self.positions = torch.arange(t, device=device)
        # Static inputs and outputs of a step (a CUDA graph replays on these addresses).
        self.tok = torch.zeros(batch, dtype=torch.long, device=device)
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.logits = torch.empty(self.world, batch, self.vl, device=device, dtype=dtype)

    def reset(self, first_token: int = 1) -> None:
        """Back to the first decode position, every sequence on the same token."""
        self.tok.fill_(first_token)
        self.pos.fill_(self.prompt)

    def step(self, comm: Comm) -> None:
        """One decode step in place: next token into self.tok, position advanced. Only tensor
        ops on static tensors, few of them (as a serving engine's fused kernels would be):
        capturable in a CUDA graph, and the floor is the model's, not Python's."""
        b, hd, hl, kvl = self.batch, self.hd, self.hl, self.kvl
        x = self.w.embed[self.tok]
        # Per step, not per layer: the rotation at this position (index_select, not [pos]: a
        # 0-d index is read on the host, which a graph forbids) and the additive causal mask.
        at = self.pos.view(1)
        cos, sin = self.cos.index_select(0, at), self.sin.index_select(0, at)
        mask = torch.where(self.positions <= self.pos, 0.0, float("-inf")).to(x.dtype)
        for p, (kc, vc) in zip(self.w.layers, self.cache):
            qkv = _rms(x, p["n1"]) @ p["qkv"]
            qk = qkv[:, :(hl + kvl) * hd].view(b, hl + kvl, hd)
            x1, x2 = qk[..., :hd // 2], qk[..., hd // 2:]
            qk = qk * cos + torch.cat((-x2, x1), -1) * sin      # rotary, queries and keys at once
            kc.index_copy_(2, at, qk[:, hl:].unsqueeze(2))
            vc.index_copy_(2, at, qkv[:, (hl + kvl) * hd:].view(b, kvl, 1, hd))
            q = qk[:, :hl].view(b, kvl, hl // kvl, hd)          # grouped by their KV head
            s = (q @ kc.transpose(-1, -2)) * hd ** -0.5 + mask
            a = torch.softmax(s.float(), -1).to(x.dtype) @ vc
            o = a.reshape(b, hl * hd) @ p["o"]
            comm.all_reduce(o)
            x = x + o
            g, u = (_rms(x, p["n2"]) @ p["gu"]).split(self.fl, -1)
            d = (F.silu(g) * u) @ p["down"]
            comm.all_reduce(d)
            x = x + d
        local = _rms(x, self.w.norm) @ self.w.head
        comm.all_gather(self.logits.view(-1), local.reshape(-1))
        self.tok.copy_(self.logits.permute(1, 0, 2).reshape(b, -1).argmax(-1))
        self.pos.add_(1)
