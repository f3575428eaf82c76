"""OSU-style all_to_all_single (equal splits) through mcr (size = whole buffer per rank)."""

from mcr.measure.cases import BENCHES
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(BENCHES["all_to_all"])
