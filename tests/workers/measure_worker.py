"""The measurement engine on real Gloo: backends take turns sample by sample, a backend that
declines is reported and the rest still measured, samples stay paired, results are checked."""

import argparse

import mcr.comm as dist
from mcr.measure.cases import BENCHES
from mcr.measure.engine import Case, make_ctx, measure_size, parser

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


got = measure_size(ctx, Case(call, real.check), ["gloo", "auto", "mpi"], args, 2)
assert isinstance(got["mpi"], str) and "mpi" in got["mpi"], got["mpi"]   # not under mpiexec
g, a = got["gloo"], got["auto"]
assert not isinstance(g, str) and not isinstance(a, str)
assert g.paired and a.paired and len(g.samples) == len(a.samples) == 12 and len(g.rounds) == 2
timed = [be for be in seen if be != "mpi"]
# Per round: warm-up (1 call each), calibration (1 sample each), then 6 samples in turns, the
# first backend of each sample rotating: gloo auto, auto gloo, ...; round 2 starts with auto.
r1 = timed[:4 + 12]
assert r1[:4] == ["gloo", None, "gloo", None], r1[:4]
assert r1[4:] == ["gloo", None, None, "gloo"] * 3, r1[4:]
r2 = timed[16:]
assert r2[:4] == [None, "gloo", None, "gloo"] and r2[4:] == [None, "gloo", "gloo", None] * 3, r2
real.call(None)
real.check()
assert all(s > 0 for s in g.samples + a.samples)
ratio = a.speedup_over(g)
assert 0.1 < ratio < 10, ratio
print(f"rank {ctx.rank}: ok, auto/gloo {ratio:.3f}", flush=True)
dist.destroy_process_group()
