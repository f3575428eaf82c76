"""The overlap profile's load: a collective on a side stream beside bf16 GEMMs on the compute
stream, as FSDP2 and ZeRO-3 prefetch beside a layer's compute (mcr-tune --profiles overlap)."""

from __future__ import annotations

import torch

import mcr.comm as dist
from mcr.errors import BackendUnavailable
from mcr.measure.engine import Case, Ctx

MAX_LOAD_GEMMS = 64     # a 4096^3 bf16 GEMM is ~0.2 ms: 64 cover ~13 ms, past a 1 GiB call


def _covering_gemms(ctx: Ctx, case: Case, backends: list[str], a: torch.Tensor,
                    c: torch.Tensor) -> int:
    """How many GEMMs of `a` cover one call of the first of `backends` that serves it (its
    fastest of 3 synchronized calls); the slowest rank's count, so the ranks load alike."""
    cur = torch.cuda.current_stream()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record(cur)
    for _ in range(3):
        torch.mm(a, a, out=c)
    e.record(cur)
    e.synchronize()
    gemm_ms = s.elapsed_time(e) / 3
    call_ms = 0.0
    for be in backends:
        try:
            times = []
            for _ in range(3):
                s.record(cur)
                case.call(None if be == "auto" else be)
                e.record(cur)
                e.synchronize()
                times.append(s.elapsed_time(e))
        except BackendUnavailable:
            continue
        call_ms = min(times)
        break
    k = torch.tensor([max(1, min(MAX_LOAD_GEMMS, -(-call_ms // gemm_ms)))],
                     dtype=torch.float64)
    dist.all_reduce(k, op=dist.ReduceOp.MAX, group=ctx.group, backend="gloo")
    return int(k[0])


def under_load(ctx: Ctx, case: Case, gemm: int = 4096, cover: list[str] | None = None) -> Case:
    """The call on a side stream beside bf16 GEMMs on the compute stream (the overlap profile,
    as FSDP2 and ZeRO-3 prefetch); time_case then times the whole overlapped window. One GEMM,
    or with `cover` (backends, first that serves first) as many as cover that backend's call
    alone: a prefetch runs beside a layer's compute from start to end, and copies a call issues
    late (copy-outs of plain outputs) wait behind it. CUDA only."""
    if ctx.device != "cuda":
        raise ValueError("the overlap profile is measured on CUDA tensors only")
    a = torch.randn(gemm, gemm, device=ctx.device, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    side = torch.cuda.Stream()
    gemms = _covering_gemms(ctx, case, cover, a, c) if cover else 1

    def call(be: str | None) -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            case.call(be)
        for _ in range(gemms):
            torch.mm(a, a, out=c)
        torch.cuda.current_stream().wait_stream(side)
    return Case(call, case.check, load_gemms=gemms)
