"""ROCm engine of the `sdma` backend: mori's SDMA all-gather and all-to-all.

Written against mori's documented Python API (mori.shmem, mori.ccl.AllgatherSdma / All2allSdma).
No AMD GPU exists where mcr is developed: this module is exercised by an interface test with a
named stand-in for mori (tests/standins/mori, run by tests/workers/mori_worker.py), never
on hardware.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as tdist


def _stream() -> int:
    return torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else 0


class MoriGroup:
    """mori shmem bound to one torch process group, with one SDMA handle per op."""

    def __init__(self, pg: tdist.ProcessGroup, transit_bytes: int) -> None:
        # mori reads this when shmem starts; later it is too late to turn SDMA on.
        os.environ["MORI_ENABLE_SDMA"] = "1"
        import mori.ccl as ccl
        import mori.shmem as shmem
        shmem.shmem_torch_process_group_init(pg.group_name)
        self.me, self.n = pg.rank(), pg.size()
        self.ag = ccl.AllgatherSdma(self.me, self.n, transit_buffer_size=transit_bytes)
        self.a2a = ccl.All2allSdma(self.me, self.n, transit_buffer_size=transit_bytes)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        """out <- every rank's inp, in rank order (count in elements of inp's dtype)."""
        self._ok(self.ag(inp, out, inp.numel(), stream=_stream()), "AllgatherSdma")

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        """Equal-split all-to-all; mori counts 32-bit words per PE."""
        words = inp.numel() * inp.element_size() // 4 // self.n
        self._ok(self.a2a(inp.view(-1).view(torch.int32), out.view(-1).view(torch.int32), words,
                          stream=_stream()), "All2allSdma")

    @staticmethod
    def _ok(ret: Any, what: str) -> None:
        if ret is False:
            raise RuntimeError(f"mori {what} reported failure")
