"""MCR_PROFILE=auto on GPU tensors: a call on a side stream takes the table's overlap rule, one
on the default stream or inside `profile("standalone")` the standalone rule; each checked by the
library that served it and by the sum, and the summary's count per profile. Ranks may share a
GPU (the table names host libraries)."""

import os

import torch

import mcr.comm as dist
from mcr import report, runtime

rank_env = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(int(rank_env) % torch.cuda.device_count())
dist.init_distributed(verbose=False)
r, n = dist.get_rank(), dist.get_world_size()
side = torch.cuda.Stream()


def served_by(fn) -> str:  # noqa: ANN001
    """The one library that served the all-reduces fn made, and their sum checked."""
    before = runtime.get().dispatcher.served()
    t = torch.full((1000,), float(r + 1), device="cuda")
    fn(t)
    torch.cuda.synchronize()
    assert t.eq(n * (n + 1) / 2).all(), t[:4]
    after = runtime.get().dispatcher.served()
    got = [be for (op, be), v in after.items() if op == "all_reduce"
           and v[0] > before.get((op, be), [0, 0])[0]]
    assert len(got) == 1, got
    return got[0]


def on_side(t: torch.Tensor) -> None:
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dist.all_reduce(t)
    torch.cuda.current_stream().wait_stream(side)


def standalone_on_side(t: torch.Tensor) -> None:
    with dist.profile("standalone"):
        on_side(t)


picks = {"default": served_by(dist.all_reduce), "side": served_by(on_side),
         "side_standalone": served_by(standalone_on_side),
         "which_side": None}
with torch.cuda.stream(side):
    picks["which_side"] = dist.which_backend("all_reduce", 4000, torch.float32, "cuda")
picks["overlap_calls"] = runtime.get().dispatcher.profiles().get("overlap", [0])[0]
text = report.summary(runtime.get())
assert ("table profile: overlap" in text) == (picks["overlap_calls"] > 0), text
print(f"rank {r}: PROFILE {runtime.get().cfg.profile} " +
      " ".join(f"{k}={v}" for k, v in picks.items()), flush=True)
dist.destroy_process_group()
