"""OSU-style reduce_scatter_tensor through mcr (size = input)."""

from mcr.measure.cases import BENCHES
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(BENCHES["reduce_scatter"])
