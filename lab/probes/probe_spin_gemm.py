"""Does a one-block kernel that spins (as sdma's barrier kernel does while it waits for a peer)
slow the GEMMs running beside it? One GPU, one process.

A burst of bf16 GEMMs runs on one stream; on another, torch.cuda._sleep (a one-thread kernel
that busy-waits a number of cycles, the footprint of torch's symmetric-memory barrier kernel:
one small block) spins for --spin-ms, started with the burst. Interleaved over --reps: the
burst alone and with the spinner, and the spinner alone. If a GEMM block cannot share the SM the
spinner holds, the GEMM's last wave waits for the spinner or runs one SM short.

    python -m lab.probes.probe_spin_gemm --gemm 8192 --burst 12 --spin-ms 5 --reps 9
"""

from __future__ import annotations

import argparse
import statistics

import torch


def main() -> None:
    """Time the burst alone and beside the spinner, interleaved."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemm", type=int, default=8192, help="GEMM side (bf16)")
    ap.add_argument("--burst", type=int, default=12, help="GEMMs per burst")
    ap.add_argument("--spin-ms", type=float, default=5.0, help="how long the spinner spins")
    ap.add_argument("--spinners", type=int, default=1, help="spinning kernels at once")
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    a = torch.randn(args.gemm, args.gemm, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    s_gemm = torch.cuda.Stream()
    s_spin = [torch.cuda.Stream() for _ in range(args.spinners)]
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    # Calibrate cycles per ms with one spinner alone.
    torch.cuda.synchronize()
    ev[2].record()
    torch.cuda._sleep(10_000_000)
    ev[3].record()
    torch.cuda.synchronize()
    cycles = int(10_000_000 * args.spin_ms / ev[2].elapsed_time(ev[3]))

    def run(spin: bool, gemm: bool) -> tuple[float, float]:
        torch.cuda.synchronize()
        start = torch.cuda.current_stream()
        ev[0].record(start)
        if spin:
            for s in s_spin:
                s.wait_event(ev[0])
                with torch.cuda.stream(s):
                    torch.cuda._sleep(cycles)
            ev[3].record(s_spin[-1])
        if gemm:
            s_gemm.wait_event(ev[0])
            with torch.cuda.stream(s_gemm):
                for _ in range(args.burst):
                    torch.mm(a, a, out=c)
            ev[1].record(s_gemm)
        torch.cuda.synchronize()
        return (ev[0].elapsed_time(ev[1]) if gemm else 0.0,
                ev[0].elapsed_time(ev[3]) if spin else 0.0)

    run(False, True)
    res: dict[str, list[float]] = {"burst alone": [], "burst beside spinner": [],
                                   "spinner beside burst": [], "spinner alone": []}
    for _ in range(args.reps):
        res["burst alone"].append(run(False, True)[0])
        g, s = run(True, True)
        res["burst beside spinner"].append(g)
        res["spinner beside burst"].append(s)
        res["spinner alone"].append(run(True, False)[1])
    print(f"# {args.burst} bf16 GEMMs of {args.gemm}^2 beside {args.spinners} spinning "
          f"one-thread kernel(s) of {args.spin_ms} ms, {args.reps} interleaved reps, ms "
          f"medians (min-max); {torch.cuda.get_device_name()}, "
          f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    for k, v in res.items():
        print(f"{k:<22} {statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})", flush=True)


if __name__ == "__main__":
    main()
