"""OSU-style all_reduce latency and bandwidth through mcr."""

from mcr.measure.cases import BENCHES
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(BENCHES["all_reduce"])
