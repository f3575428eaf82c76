"""OSU-style broadcast from rank 0 through mcr."""

from mcr.measure.cases import BENCHES
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(BENCHES["broadcast"])
