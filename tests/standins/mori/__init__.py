"""STAND-IN for AMD's mori (no AMD GPU here): the slice of its Python API mcr calls, done by Gloo.

Only for the interface test of mcr's sdma ROCm engine (tests/workers/mori_worker.py). It checks
the calls mcr makes (shmem bootstrap from a torch process group, MORI_ENABLE_SDMA set before it,
element counts, stream handles) and moves real data between real processes through Gloo, so a
wrong count or layout in mcr gives wrong data. It says nothing about mori's speed or its kernels.
"""

STANDIN = True
