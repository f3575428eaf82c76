"""DeepSpeed's expert, sequence and tensor parallelism and sparse gradients on CPU, through mcr,
against plain DeepSpeed (or, for inference, the unsharded model).

--model moe: a deepspeed.moe.layer.MoE of 4 experts split over expert-parallel groups of 2
(all_to_all_single of the routed tokens, and with --no-drop an all-reduce MAX of the capacity)
under ZeRO-2; on 4 ranks DeepSpeed also makes expert-data-parallel groups. --model ulysses:
deepspeed.sequence.layer.DistributedAttention over the sequence-parallel group DeepSpeed makes
from `mesh_param` (all_to_all_single of q, k, v and the context; with --heads 3 on 2 ranks the
heads split unevenly, so the all-to-alls carry split sizes). --model autotp: a tiny Hugging Face
Llama trained with DeepSpeed's AutoTP (`tensor_parallel.autotp_size`, its groups from a device
mesh). --model sparse: DeepSpeed's data-parallel engine (ZeRO stage 0) with an
nn.Embedding(sparse=True), whose gradients it all-gathers as indices and 2-D values (list
all_gather of multi-dimensional tensors). For these, one process trains with plain DeepSpeed,
installs mcr and trains again from the same seed; every rank asserts equal losses (within
--rtol: MPI sums more than two ranks in another order than Gloo). --model tp-inference:
`deepspeed.init_inference` with AutoTP through mcr (inference_all_reduce), generated tokens
equal to the unsharded model's; plain DeepSpeed takes its shared-memory kernel there, which
crashed on the 2-core CI VM, so the reference is the model itself. Every rank also asserts that
mcr served at least 90% of the calls and, with --expect, which libraries served which ops.
Prints `rank R: PARALLEL OK <n>`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
from common import same_losses, served_summary

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
from deepspeed.moe.layer import MoE  # noqa: E402
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer  # noqa: E402
from deepspeed.sequence.layer import DistributedAttention  # noqa: E402

import mcr.comm as dist  # noqa: E402
import mcr.integrations.deepspeed as mcr_ds  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True,
                choices=("moe", "ulysses", "autotp", "tp-inference", "sparse"))
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--k", type=int, default=1, help="MoE: experts per token (top-k gating)")
ap.add_argument("--no-drop", action="store_true",
                help="MoE: drop_tokens=False, so the capacity is agreed by an all-reduce MAX")
ap.add_argument("--heads", type=int, default=4, help="Ulysses: attention heads")
ap.add_argument("--sp", type=int, default=0,
                help="Ulysses: sequence-parallel group size (default: every rank); the rest of "
                     "the world is data parallel")
ap.add_argument("--rtol", type=float, default=0.0,
                help="losses equal within this relative difference (0: bit for bit)")
ap.add_argument("--expect", default="", help="op:lib,... that must appear in mcr's summary")
args = ap.parse_args()
HIDDEN, TOKENS, HEAD_DIM = 32, 16, 8


class MoENet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        expert = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 64), torch.nn.GELU(),
                                     torch.nn.Linear(64, HIDDEN))
        self.inp = torch.nn.Linear(16, HIDDEN)
        self.moe = MoE(HIDDEN, expert, num_experts=4, ep_size=2, k=args.k, min_capacity=2,
                       drop_tokens=not args.no_drop)
        self.out = torch.nn.Linear(HIDDEN, 16)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, aux, _ = self.moe(torch.nn.functional.gelu(self.inp(x)))
        return torch.nn.functional.mse_loss(self.out(h), y) + 0.01 * aux


def _local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_: Any,
                     **__: Any) -> torch.Tensor:
    # [seq, batch, heads, dim] -> [batch, heads, seq, dim] and back
    o = torch.nn.functional.scaled_dot_product_attention(
        q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), is_causal=True)
    return o.permute(2, 0, 1, 3).contiguous()


class UlyssesNet(torch.nn.Module):
    """One attention layer over this rank's slice of the sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 3 * args.heads * HEAD_DIM)
        self.attn: DistributedAttention | None = None   # its group comes from initialize
        self.out = torch.nn.Linear(args.heads * HEAD_DIM, 16)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s, b = x.shape[:2]
        q, k, v = self.qkv(x).view(s, b, 3, args.heads, HEAD_DIM).unbind(2)
        o = self.attn(q.contiguous(), k.contiguous(), v.contiguous(), batch_dim_idx=1)
        return torch.nn.functional.mse_loss(self.out(o.reshape(s, b, -1)), y)


class SparseNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, HIDDEN, sparse=True)
        self.out = torch.nn.Linear(HIDDEN, 16)

    def forward(self, ids: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.out(self.emb(ids)).mean(1), y)


def tiny_llama() -> torch.nn.Module:
    """A two-layer Llama with grouped-query attention, random weights from the current seed."""
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
          "steps_per_print": 10_000,
          "zero_optimization": {"stage": 2 if args.model == "moe" else 1,
                                "reduce_bucket_size": 4_000, "allgather_bucket_size": 4_000}}


def engine_for_run() -> Any:
    torch.manual_seed(1234)
    if args.model == "moe":
        model: torch.nn.Module = MoENet()
        params = split_params_into_different_moe_groups_for_optimizer(
            {"params": list(model.parameters()), "name": "all"})
        opt = torch.optim.AdamW(params, lr=1e-2)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=CONFIG)
    elif args.model == "sparse":   # DeepSpeed reduces sparse gradients at stage 0 only
        model = SparseNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)   # Adam takes no sparse gradients
        cfg = dict(CONFIG, zero_optimization={"stage": 0})
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    elif args.model == "autotp":
        model = tiny_llama()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        cfg = dict(CONFIG, tensor_parallel={"autotp_size": torch.distributed.get_world_size()})
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    else:
        # DeepSpeed makes the sequence-parallel groups from its device mesh.
        world = torch.distributed.get_world_size()
        sp = args.sp or world
        cfg = dict(CONFIG, sequence_parallel_size=sp)
        mesh = (world // sp, sp)
        model = UlyssesNet()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg,
                                          mesh_param=mesh)
        # As DeepSpeed's own Ulysses test does: the group DeepSpeed made from its mesh.
        model.attn = DistributedAttention(_local_attention, engine.seq_parallel_group,
                                          scatter_idx=2, gather_idx=0)
    return engine


def loss_of(engine: Any, step: int, rank: int) -> torch.Tensor:
    """The step's forward on this rank's batch."""
    if args.model == "autotp":   # every rank of a tensor-parallel group reads the same batch
        ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(step))
        return engine(input_ids=ids, labels=ids).loss
    g = torch.Generator().manual_seed(step * 100 + rank)
    if args.model == "sparse":   # ids of 4 sequences of 6 tokens: each rank touches other rows
        return engine(torch.randint(0, 50, (4, 6), generator=g), torch.randn(4, 16, generator=g))
    # MoE: tokens x features; Ulysses: this rank's slice of a sequence, [seq, batch, features]
    shape = (TOKENS, 16) if args.model == "moe" else (8, 2, 16)
    return engine(torch.randn(shape, generator=g), torch.randn(shape, generator=g))


def train(rank: int) -> list[float]:
    engine = engine_for_run()
    losses = []
    for step in range(args.steps):
        loss = loss_of(engine, step, rank)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    engine.destroy()
    return losses


def generate() -> list[torch.Tensor]:
    """AutoTP inference through mcr, and the unsharded model: [tokens, logits] of each."""
    out = []
    for sharded in (True, False):
        torch.manual_seed(1234)
        model = tiny_llama().eval()
        if sharded:
            tp = {"tp_size": torch.distributed.get_world_size()}
            model = deepspeed.init_inference(model, tensor_parallel=tp, dtype=torch.float32,
                                             replace_with_kernel_inject=False).module
        ids = torch.arange(12).view(1, 12) * 7 % 128
        with torch.no_grad():
            out.append([model.generate(ids, max_new_tokens=8, do_sample=False), model(ids).logits])
    (tokens, logits), (want_tokens, want_logits) = out
    assert torch.equal(tokens, want_tokens), (tokens, want_tokens)
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
    return [float(t) for t in tokens[0, -8:]]


deepspeed.init_distributed(dist_backend="gloo")
rank = torch.distributed.get_rank()
if args.model == "tp-inference":
    assert mcr_ds.install() > 30
    plain = through_mcr = generate()
else:
    plain = train(rank)
    assert mcr_ds.install() > 30
    through_mcr = train(rank)
served, missed = served_summary(dist.log_summary(return_dict=True), args.expect)
same_losses(rank, plain, through_mcr, args.rtol)
print(f"rank {rank}: served {served} of {served + missed} calls", flush=True)
what = "tokens" if args.model == "tp-inference" else "losses"
print(f"rank {rank}: PARALLEL OK {len(through_mcr)} {what} {through_mcr[0]:.6f}.."
      f"{through_mcr[-1]:.6f}", flush=True)
deepspeed.comm.destroy_process_group()
