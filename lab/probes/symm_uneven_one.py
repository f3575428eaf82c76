"""One GPU, one rank: mcr.comm.all_to_all_single with split sizes on symm (MCR_SYMM_OPS with
all_to_all_uneven), through the whole dispatch path, against the input; symm's summary line.
Run: torchrun --nproc-per-node 1 lab/probes/symm_uneven_one.py"""

import os

import torch

os.environ.setdefault("MCR_SYMM_OPS", "all_reduce,all_to_all,all_to_all_uneven")
import mcr.comm as dist  # noqa: E402

dist.init_distributed()
ok = True
for rows, dt in ((37, torch.bfloat16), (1, torch.float32), (0, torch.uint8), (5000, torch.int32)):
    x = (torch.arange(rows * 8, device="cuda") % 251).to(dt).view(rows, 8)
    out = torch.full_like(x, 3)
    for _ in range(3):
        dist.all_to_all_single(out, x, [rows], [rows], backend="symm")
    torch.cuda.synchronize()
    ok &= torch.equal(out, x)
    print(f"rows {rows} {dt}: equal {torch.equal(out, x)}", flush=True)
print("ALL OK" if ok else "MISMATCH", flush=True)
dist.destroy_process_group()
