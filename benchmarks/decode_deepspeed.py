"""decode.py --impl deepspeed: DeepSpeed AutoTP inference of a random-init Hugging Face Llama.

DeepSpeed shards the model (`init_inference`, replace_with_kernel_inject=False: its row-parallel
layers end in `deepspeed.comm.inference_all_reduce`); every configuration decodes through the
same engine: plain is DeepSpeed's own deepspeed.comm, mcr is the same after
`mcr.integrations.deepspeed.install()` (uninstall() gives it back), floor swaps DeepSpeed's
inference all-reduce for nothing. Eager decoding goes through HF's forward with a dynamic KV
cache; `--mode graph` captures one step with HF's static cache where this transformers allows
it (the reason is reported where it does not).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as tdist

from benchmarks.common import sync
from benchmarks.tp_model import SHAPES
from mcr.layout import stated_local_size
from mcr.measure.turns import turn_orders


def build(shape: dict[str, int], world: int, device: torch.device, dtype: torch.dtype) -> Any:
    """The HF model, the same random weights on every rank, sharded by DeepSpeed AutoTP."""
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if device.type == "cuda" else "cpu")
    if device.type == "cpu" and "LOCAL_SIZE" not in os.environ:
        # DeepSpeed's CPU all-reduce (its shared-memory op) sets up its buffers only where
        # LOCAL_SIZE, which DeepSpeed's own launcher states, covers the world; under torchrun
        # or mpirun it then reduces through buffers it never made and segfaults (0.19.8).
        local = stated_local_size()
        if local is not None:
            os.environ["LOCAL_SIZE"] = str(local)
    import deepspeed
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
                      num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                      num_key_value_heads=shape["kv_heads"], vocab_size=shape["vocab"],
                      max_position_embeddings=4096)
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(before)
    engine = deepspeed.init_inference(model, tensor_parallel={"tp_size": world}, dtype=dtype,
                                      replace_with_kernel_inject=False)
    return engine.module


class Switch:
    """Which deepspeed.comm the model's calls reach: DeepSpeed's, mcr's, or none (floor: the
    named functions replaced by stand-ins, in every DeepSpeed module that bound them)."""

    def __init__(self, floor: dict[str, Callable[..., Any]] | None = None) -> None:
        import deepspeed.comm as ds_comm

        import mcr.integrations.deepspeed as mcr_ds
        self.ds_comm, self.mcr_ds = ds_comm, mcr_ds
        self.floor = floor if floor is not None else \
            {"inference_all_reduce": lambda tensor, *a, **k: tensor}
        self.saved: dict[str, Any] = {}

    def to(self, config: str) -> None:
        """Route the next calls as `config` says."""
        for name, orig in self.saved.items():
            _replace(self.floor[name], orig)
        self.saved.clear()
        if config == "mcr":
            self.mcr_ds.install()
        else:
            self.mcr_ds.uninstall()
        if config == "floor":
            for name, stand_in in self.floor.items():
                self.saved[name] = getattr(self.ds_comm, name)
                _replace(self.saved[name], stand_in)


def _replace(old: Any, new: Any) -> None:
    """Every attribute of a loaded DeepSpeed module that is `old` becomes `new`."""
    for mod_name, m in list(sys.modules.items()):
        if m is not None and (mod_name == "deepspeed" or mod_name.startswith("deepspeed.")):
            for attr, val in list(vars(m).items()):
                if val is old:
                    setattr(m, attr, new)


def _cache(model: Any, batch: int, length: int) -> Any:
    """HF's static cache, as this transformers builds it."""
    from transformers import StaticCache
    try:
        return StaticCache(config=model.config, max_cache_len=length)
    except TypeError:
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=length,
                           device=model.device, dtype=model.dtype)


class Decoder:
    """Greedy decoding of one batch, eager (dynamic cache) or replayed (static cache)."""

    def __init__(self, model: Any, batch: int, prompt: int, steps: int, mode: str) -> None:
        self.model, self.mode, self.steps = model, mode, steps
        dev = model.device
        g = torch.Generator().manual_seed(7)
        self.prompt = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=g
                                    ).to(dev)
        self.graph: torch.cuda.CUDAGraph | None = None
        if mode == "graph":
            self.cache = _cache(model, batch, prompt + steps + 8)
            self.tok = torch.zeros(batch, 1, dtype=torch.long, device=dev)
            self.at = torch.zeros(1, dtype=torch.long, device=dev)

    @torch.no_grad()
    def start(self) -> torch.Tensor:
        """Prefill the prompt (untimed); the first token."""
        n = self.prompt.shape[1]
        if self.mode == "graph":
            self.cache.reset()
            out = self.model(self.prompt, past_key_values=self.cache, use_cache=True,
                             cache_position=torch.arange(n, device=self.prompt.device))
            self.tok.copy_(out.logits[:, -1:].argmax(-1))
            self.at.fill_(n)
            return self.tok
        from transformers import DynamicCache
        self.cache = DynamicCache()
        out = self.model(self.prompt, past_key_values=self.cache, use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    @torch.no_grad()
    def step(self, tok: torch.Tensor) -> torch.Tensor:
        """One token more."""
        if self.mode == "graph":
            if self.graph is None:
                self._capture()
            self.graph.replay()
            return self.tok
        out = self.model(tok, past_key_values=self.cache, use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    def _graph_step(self) -> None:
        out = self.model(self.tok, past_key_values=self.cache, use_cache=True,
                         cache_position=self.at)
        self.tok.copy_(out.logits[:, -1:].argmax(-1))
        self.at.add_(1)

    def _capture(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._graph_step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._graph_step()

    def tokens(self, steps: int) -> list[tuple[list[int]]]:
        """The greedy tokens of `steps` steps."""
        tok, out = self.start(), []
        for _ in range(steps):
            tok = self.step(tok)
            out.append((tok.view(-1).tolist(),))
        return out

    def block(self, device: torch.device) -> float:
        """ms per token of `steps` decode steps after an untimed prefill."""
        tok = self.start()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(self.steps):
            tok = self.step(tok)
        sync(device)
        return 1e3 * (time.perf_counter() - t0) / self.steps


def run_deepspeed(args: argparse.Namespace, device: torch.device, dtype: torch.dtype,
                  summarize: Callable[..., dict[str, Any]],
                  say: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Every batch and mode asked for, configurations alternated by toggling mcr."""
    model = build(SHAPES[args.shape], tdist.get_world_size(), device, dtype)
    switch, rows = Switch(), []
    for batch in args.batch:
        for mode in args.mode:
            if mode == "graph" and device.type != "cuda":
                continue
            row: dict[str, Any] = {"impl": "deepspeed", "shape": args.shape, "batch": batch,
                                   "mode": mode}
            try:
                decoders = {c: Decoder(model, batch, args.prompt, args.steps, mode)
                            for c in args.configs}
                tokens, ms = {}, {c: [] for c in args.configs}
                for c in args.configs:       # warm up (captures, mcr's first calls), tokens
                    switch.to(c)
                    decoders[c].block(device)
                    if c != "floor":
                        tokens[c] = decoders[c].tokens(args.check_steps)
                for order in turn_orders(len(args.configs), args.pairs):
                    for i in order:
                        c = args.configs[i]
                        switch.to(c)
                        ms[c].append(decoders[c].block(device))
                row.update(summarize(ms, tokens))
            except Exception as e:  # noqa: BLE001 - say why this point could not run
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                if tdist.get_rank() == 0:
                    print(f"deepspeed {args.shape} batch {batch} {mode}: {row['error']}",
                          flush=True)
            switch.to("plain")
            rows.append(row)
            if "error" not in row:
                say(row)
    return rows
