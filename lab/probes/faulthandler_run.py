"""Run a module as `python -m` would, with every thread's Python stack dumped to stderr after
SECONDS (and again every SECONDS): where a hang sits, on each rank.

    python lab/probes/faulthandler_run.py SECONDS -m package.module ARGS...
"""
import faulthandler
import runpy
import sys

if len(sys.argv) < 4 or sys.argv[2] != "-m":
    raise SystemExit(__doc__)
faulthandler.dump_traceback_later(float(sys.argv[1]), repeat=True)
module = sys.argv[3]
sys.argv = [module, *sys.argv[4:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
