"""Groundwork for zero-copy all-gathers into plain outputs by CUDA IPC (NOTES.md, "What would be
safe"): what the design's costs would be, measured before building it.

1. Segments: a ZeRO-3 run (DeepSpeed, the train_step model) records, per all-gather, the CUDA
   allocation its output lies in (driver buffer id, base, size) and whether legacy IPC can export
   it. The design caches one IPC handle per (peer, allocation): it pays only if the outputs settle
   into a few allocations that stop changing after the first steps.
2. Open: each rank exports a fresh allocation, its peer opens it (cuIpcOpenMemHandle), pushes
   into it and closes it; the owner checks the bytes. Times export, open and close.
3. Rendezvous: the host-side exchange the design needs per call (each rank publishes, then waits
   for its peers' serial) through shared memory, round-trip time per call.

One GPU may be shared by both ranks (the stand-in on one-GPU leases: same process layout, no
NVLink; DeepSpeed then runs over Gloo, else NCCL). Part 1 also says how far apart the ranks'
hosts reach each all-gather: what the design's per-call host exchange would cost (skew_*).
    DS_ACCELERATOR=cuda torchrun --standalone --nproc_per_node=2 lab/probes/probe_ipc_segments.py
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist

from mcr.backends.cuda.driver import Driver

_BUFFER_ID, _IPC_CAPABLE, _RANGE_START, _RANGE_SIZE = 7, 10, 11, 12   # CUpointer_attribute


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]   # not c_char: that field reads to a NUL


class Cu(Driver):
    """mcr's libcuda bindings plus the pointer attributes and IPC calls this probe needs."""

    def attr(self, ptr: int, which: int, ctype: type = ctypes.c_uint64) -> int:
        """One pointer attribute."""
        v = ctype()
        self._check(self.lib.cuPointerGetAttribute(ctypes.byref(v), which, ctypes.c_uint64(ptr)),
                    f"cuPointerGetAttribute({which})")
        return int(v.value)

    def export(self, base: int) -> bytes:
        """The legacy IPC handle of the allocation at base."""
        h = _Handle()
        self._check(self.lib.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(base)),
                    "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(h), 64)

    def open(self, handle: bytes) -> int:
        """Map a peer's allocation here."""
        h = _Handle()
        ctypes.memmove(ctypes.addressof(h), handle, 64)
        p = ctypes.c_uint64()
        self._check(self.lib.cuIpcOpenMemHandle_v2(ctypes.byref(p), h, 1), "cuIpcOpenMemHandle")
        return p.value

    def close(self, ptr: int) -> None:
        """Unmap a peer's allocation."""
        self._check(self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(ptr)), "cuIpcCloseMemHandle")


def segments(cu: Cu, steps: int, shape: str) -> dict:
    """Part 1: the allocations ZeRO-3's all-gather outputs lie in, step by step."""
    import deepspeed
    import deepspeed.comm.comm as dcc

    from benchmarks.train_step import SHAPES, batch, build_model, lm_loss
    seen: list[tuple] = []
    entry: list[int] = []   # host clock at each all-gather's entry (one clock per host)
    orig = dcc.all_gather_into_tensor

    def record(output_tensor: torch.Tensor, *a: Any, **k: Any) -> Any:
        entry.append(time.monotonic_ns())
        p = output_tensor.data_ptr()
        base = cu.attr(p, _RANGE_START)
        seen.append((cu.attr(p, _BUFFER_ID), base, cu.attr(p, _RANGE_SIZE),
                     output_tensor.numel() * output_tensor.element_size(),
                     cu.attr(p, _IPC_CAPABLE, ctypes.c_int)))
        return orig(output_tensor, *a, **k)
    dcc.all_gather_into_tensor = record
    sh = SHAPES[shape]
    dev = torch.device("cuda", torch.cuda.current_device())
    cfg = {"train_micro_batch_size_per_gpu": sh["mb"], "gradient_clipping": 1.0,
           "steps_per_print": 1 << 30, "bf16": {"enabled": True},
           "zero_allow_untested_optimizer": True,
           "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                                 "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7,
                                 "stage3_param_persistence_threshold": 1e5}}
    model = build_model(sh, torch.bfloat16, dev)
    engine, *_ = deepspeed.initialize(model=model, config=cfg,
                                      optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))
    rows, known = [], set()
    for s in range(steps):
        seen.clear()
        entry.clear()
        x, y = batch(s, tdist.get_rank(), sh, dev)
        loss = lm_loss(engine, x, y)
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        ids = {r[0] for r in seen}
        t0 = time.perf_counter()
        for bid, base, *_ in {r[0]: r for r in seen}.values():
            if bid not in known and all(r[4] for r in seen if r[0] == bid):
                cu.export(base)
        export_ms = (time.perf_counter() - t0) * 1e3
        rows.append(dict(step=s, calls=len(seen), allocations=len(ids), new=len(ids - known),
                         ipc_capable=sum(r[4] for r in seen), bytes=sum(r[3] for r in seen),
                         alloc_bytes=sum({r[0]: r[2] for r in seen}.values()),
                         export_new_ms=round(export_ms, 3), **skew(entry)))
        known |= ids
    dcc.all_gather_into_tensor = orig
    return dict(steps=rows)


def skew(entry: list[int]) -> dict:
    """How far apart the ranks' hosts reach the same all-gather (what a host exchange per call
    would make the earlier one wait): median, p90 and max over the step, and their sum."""
    every: list = [None] * tdist.get_world_size()
    tdist.all_gather_object(every, entry)
    gaps = sorted((max(c) - min(c)) / 1e3 for c in zip(*every))
    if not gaps:
        return {}
    return dict(skew_med_us=round(gaps[len(gaps) // 2], 1),
                skew_p90_us=round(gaps[int(len(gaps) * 0.9)], 1),
                skew_max_us=round(gaps[-1], 1), skew_sum_ms=round(sum(gaps) / 1e3, 2))


def open_cost(cu: Cu, sizes: list[int], reps: int) -> dict:
    """Part 2: export, open by the peer, push into it, close; the owner checks the bytes."""
    me, peer = tdist.get_rank(), 1 - tdist.get_rank()
    out = {}
    for n in sizes:
        t_exp, t_open, t_close = [], [], []
        for i in range(reps):
            mine = torch.zeros(n, dtype=torch.uint8, device="cuda")
            src = torch.full((n,), 1 + (i + me) % 200, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            base = cu.attr(mine.data_ptr(), _RANGE_START)
            t = time.perf_counter()
            h = cu.export(base)
            t_exp.append(time.perf_counter() - t)
            got: list = [None, None]
            tdist.all_gather_object(got, (h, mine.data_ptr() - base))
            ph, off = got[peer]
            t = time.perf_counter()
            mapped = cu.open(ph)
            t_open.append(time.perf_counter() - t)
            cu.memcpy(mapped + off, src.data_ptr(), n, torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            t = time.perf_counter()
            cu.close(mapped)
            t_close.append(time.perf_counter() - t)
            tdist.barrier()
            want = 1 + (i + peer) % 200
            assert bool((mine == want).all()), f"rank {me}: peer's push did not land ({n} B)"
            del mine, src
        med = lambda v: round(statistics.median(v) * 1e6, 1)   # noqa: E731
        out[n] = dict(export_us=med(t_exp), open_us=med(t_open), close_us=med(t_close),
                      open_max_us=round(max(t_open) * 1e6, 1))
    return out


def rendezvous(rounds: int) -> dict:
    """Part 3: per call, publish a serial in shared memory and spin until the peer's matches."""
    me = tdist.get_rank()
    name = [f"mcr_probe_{os.getpid()}"]
    tdist.broadcast_object_list(name, src=0)
    if me == 0:
        shm = shared_memory.SharedMemory(name=name[0], create=True, size=4096)
    tdist.barrier()
    if me != 0:
        shm = shared_memory.SharedMemory(name=name[0])
        from multiprocessing import resource_tracker
        resource_tracker.unregister(shm._name, "shared_memory")   # rank 0 owns and unlinks it
    slots = np.ndarray((2, 8), dtype=np.int64, buffer=shm.buf)
    if me == 0:
        slots[:] = 0
    tdist.barrier()
    t = time.perf_counter()
    for i in range(1, rounds + 1):
        slots[me, 0] = i
        while slots[1 - me, 0] < i:
            pass
    per = (time.perf_counter() - t) / rounds
    tdist.barrier()
    del slots
    shm.close()
    if me == 0:
        shm.unlink()
    return dict(rounds=rounds, us_per_call=round(per * 1e6, 2))


def main() -> None:
    """Run the parts asked for; rank 0 prints and writes JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="segments,open,rendezvous")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--shape", default="large")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local % torch.cuda.device_count())
    if local >= torch.cuda.device_count():
        os.environ["LOCAL_RANK"] = str(local % torch.cuda.device_count())  # DeepSpeed's device
    parts = args.parts.split(",")
    if "segments" in parts:
        import deepspeed
        shared = int(os.environ.get("WORLD_SIZE", 1)) > torch.cuda.device_count()
        deepspeed.init_distributed(dist_backend="gloo" if shared else "nccl")
    else:
        tdist.init_process_group("gloo")
    torch.zeros(1, device="cuda")   # the primary context, current on this thread
    cu = Cu()
    res: dict = {}
    if "segments" in parts:
        res["segments"] = segments(cu, args.steps, args.shape)
    if "open" in parts:
        res["open"] = open_cost(cu, [1 << 20, 64 << 20, 512 << 20], 5)
    if "rendezvous" in parts:
        res["rendezvous"] = rendezvous(20000)
    if tdist.get_rank() == 0:
        print(json.dumps(res, indent=1), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)
    tdist.barrier()
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
