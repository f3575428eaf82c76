"""OSU-style all_gather_into_tensor through mcr (size = gathered output)."""

from mcr.measure.cases import BENCHES
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(BENCHES["all_gather"])
