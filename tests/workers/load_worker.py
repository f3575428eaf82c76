"""The overlap profile's load (mcr.measure.load.under_load) on a GPU: with `cover` it queues
as many GEMMs as cover the first serving backend's call alone (a declining one is skipped),
every rank the same count; without, one GEMM. Calls stand in for a library by sleeping on the
GPU for a set time, so the expected counts follow from timings taken here."""

import torch

import mcr.comm as dist
from mcr.errors import BackendUnavailable
from mcr.measure.engine import Case, make_ctx
from mcr.measure.load import under_load
from mcr.measure.options import parser

dist.init_distributed(verbose=False)
ctx = make_ctx(parser("load worker").parse_args(["-d", "cuda"]))
torch.cuda.set_device(ctx.rank % torch.cuda.device_count())
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.mm(a, a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def timed(fn) -> float:
    """ms of fn on the current stream, the fastest of 3."""
    out = []
    for _ in range(3):
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return min(out)


gemm_ms = timed(lambda: torch.mm(a, a))
CYCLES = {"short": 1000, "long": int(5e6 + 1e6 * ctx.rank)}   # ranks differ: max must win
sleep_ms = {k: timed(lambda c=c: torch.cuda._sleep(c)) for k, c in CYCLES.items()}


def call(be: str | None) -> None:
    if be == "declines":
        raise BackendUnavailable("declines: a stand-in that serves nothing")
    torch.cuda._sleep(CYCLES[be])


case = Case(call)
assert under_load(ctx, case).load_gemms == 1
short = under_load(ctx, case, cover=["declines", "short", "long"]).load_gemms
long_ = under_load(ctx, case, cover=["declines", "long", "short"])
mine = sleep_ms["long"] / gemm_ms
counts = torch.tensor([mine], dtype=torch.float64)
dist.all_reduce(counts, op=dist.ReduceOp.MAX, backend="gloo")
assert short == 1, (short, sleep_ms, gemm_ms)
assert 0.7 * float(counts[0]) <= long_.load_gemms <= 1.3 * float(counts[0]) + 1, \
    (long_.load_gemms, float(counts[0]), sleep_ms, gemm_ms)
window = timed(lambda: long_.call("short"))     # the GEMMs run beside a short call
assert window >= 0.8 * long_.load_gemms * gemm_ms, (window, long_.load_gemms, gemm_ms)
print(f"rank {ctx.rank}: load ok, {long_.load_gemms} GEMMs of {gemm_ms:.3f} ms cover "
      f"{sleep_ms['long']:.3f} ms", flush=True)
dist.destroy_process_group()
