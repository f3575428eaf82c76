"""The measurement engine on real Gloo: backends take turns sample by sample, a backend that
declines is reported and the rest still measured, samples stay paired, results are checked."""

import argparse

import mcr.comm as dist
from mcr.measure.cases import BENCHES
from mcr.measure.engine import Case, make_ctx, measure_size
from mcr.measure.options import parser
from mcr.measure.turns import turn_orders

dist.init_distributed(verbose=False)
args = parser("measure worker").parse_args(
    ["-d", "cpu", "-i", "6", "-x", "1", "--rounds", "2", "--max-seconds", "5"])
assert isinstance(args, argparse.Namespace) and args.interleave == "sample"
ctx = make_ctx(args)
real = BENCHES["all_reduce"].setup(ctx, 4096)
seen: list[str | None] = []


def call(be: str | None) -> None:
    seen.append(be)
    real.call(be)


for lead in (1, 0):
    args.lead_in = lead
    seen.clear()
    got = measure_size(ctx, Case(call, real.check), ["gloo", "auto", "mpi"], args, 2)
    assert isinstance(got["mpi"], str) and "mpi" in got["mpi"], got["mpi"]   # not under mpiexec
    g, a = got["gloo"], got["auto"]
    assert not isinstance(g, str) and not isinstance(a, str)
    assert g.paired and a.paired and len(g.samples) == len(a.samples) == 12 and len(g.rounds) == 2
    timed = [be for be in seen if be != "mpi"]
    # Per round: warm-up (1 call each), calibration (lead-ins and 1 sample each), then 6
    # samples, each after its lead-in calls, in the orders turn_orders gives (each backend
    # after each other alike); round 2 starts with auto.
    per = 2 + 2 * (lead + 1) + 12 * (lead + 1)
    assert len(timed) == 2 * per, (lead, len(timed))
    for r, names in enumerate((["gloo", None], [None, "gloo"])):
        got_r = timed[per * r:per * (r + 1)]
        want = names + [be for be in names for _ in range(lead + 1)] + \
            [names[b] for order in turn_orders(2, 6) for b in order for _ in range(lead + 1)]
        assert got_r == want, (lead, r, got_r)
real.call(None)
real.check()
assert all(s > 0 for s in g.samples + a.samples)
ratio = a.speedup_over(g)
assert 0.1 < ratio < 10, ratio
print(f"rank {ctx.rank}: ok, auto/gloo {ratio:.3f}", flush=True)
dist.destroy_process_group()
