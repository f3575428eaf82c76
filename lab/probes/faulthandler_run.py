"""Run a module as `python -m` would, with every thread's Python stack dumped to stderr after
SECONDS (and again every SECONDS): where a hang sits, on each rank.

    python lab/probes/faulthandler_run.py SECONDS -m package.module ARGS...

MCR_LAB_TRACE=PREFIX also writes PREFIX.rankN: every new routing decision (the group's call
number, op, bytes, even, library), each symm staging set-up (entry and exit) and each symm
call (the group's symm call count, replayed / captured / direct), flushed line by line.
"""
import faulthandler
import os
import runpy
import sys
from typing import Any


def _trace(prefix: str) -> None:
    import mcr.route as route
    from mcr.backends.symm import backend as sb
    rank = os.environ.get("RANK", "0")
    f = open(f"{prefix}.rank{rank}", "w", buffering=1)  # noqa: SIM115 - open for the run

    first = route._first

    def traced_first(rt: Any, fk: Any, op: Any, g: Any, *a: Any, **k: Any) -> Any:
        hit = first(rt, fk, op, g, *a, **k)
        f.write(f"first call={g.calls} gid={g.id} op={op} nbytes={fk[2]} dtype={fk[3]} "
                f"even={fk[-1]} graph={fk[9]} prof={fk[6]} -> {hit[0].name}\n")
        return hit
    route._first = traced_first

    init = sb._Staging.__init__

    def traced_init(self: Any, pg: Any, *a: Any, **k: Any) -> None:
        f.write(f"staging enter {pg.group_name}\n")
        init(self, pg, *a, **k)
        f.write(f"staging done {pg.group_name} ll={self.ll is not None}\n")
    sb._Staging.__init__ = traced_init

    run = sb.SymmBackend._run

    def traced_run(st: Any, sid: Any, gkey: Any, size: Any, issue: Any) -> None:
        r0, c0, d0, u0 = st.graphs.replays, st.graphs.captures, st.graphs.direct, st.unrepeated
        run(st, sid, gkey, size, issue)
        how = ("replay" if st.graphs.replays > r0 else "capture" if st.graphs.captures > c0
               else "direct" if st.graphs.direct > d0 else "unrepeated" if st.unrepeated > u0
               else "?")
        f.write(f"symm {st.calls} {gkey[0]} n={size} {how}\n")
    sb.SymmBackend._run = staticmethod(traced_run)


if len(sys.argv) < 4 or sys.argv[2] != "-m":
    raise SystemExit(__doc__)
faulthandler.dump_traceback_later(float(sys.argv[1]), repeat=True)
if os.environ.get("MCR_LAB_TRACE"):
    _trace(os.environ["MCR_LAB_TRACE"])
module = sys.argv[3]
sys.argv = [module, *sys.argv[4:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
