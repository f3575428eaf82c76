"""python -m mcr.tuner: the same as mcr-tune."""

from .cli import main

main()
