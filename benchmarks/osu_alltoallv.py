"""OSU-style all_to_all_single with split sizes (OSU's osu_alltoallv) through mcr: each rank's
block to one peer full, the others 0, 1/4, 1/2 or 3/4 of it, as MoE routing makes them (mcr's
tuner measures the same); size = group size x the largest block, as mcr keys these calls."""

from mcr.measure.cases import UNEVEN
from mcr.measure.sweep import run

if __name__ == "__main__":
    run(UNEVEN)
