"""Stand-in for mori.ccl's AllgatherSdma and All2allSdma, same call signatures, done by Gloo."""

from __future__ import annotations

import torch
import torch.distributed as tdist

from .shmem import STATE

CALLS: list[tuple] = []


class _Handle:
    def __init__(self, my_pe: int, npes: int, transit_buffer_size: int | None = None,
                 copy_output_to_user: bool = True) -> None:
        pg = STATE.get("group")
        if pg is None:
            raise RuntimeError("mori stand-in: shmem_torch_process_group_init was not called")
        if (my_pe, npes) != (pg.rank(), pg.size()):
            raise RuntimeError(f"mori stand-in: my_pe/npes {my_pe}/{npes} do not match the "
                               f"bootstrap group {pg.rank()}/{pg.size()}")
        self.pg, self.npes, self.transit = pg, npes, transit_buffer_size


class AllgatherSdma(_Handle):
    """count: elements of the input's dtype per PE (mori's wrapper converts to bytes)."""

    def __call__(self, input_data: torch.Tensor, output_data: torch.Tensor, count: int,
                 stream: int | None = None) -> bool:
        CALLS.append(("allgather", count, stream))
        if not isinstance(stream, int):
            raise TypeError("mori stand-in: stream must be an int handle")
        src = input_data.reshape(-1)[:count]
        dst = output_data.reshape(-1)[:count * self.npes]
        tdist.all_gather_into_tensor(dst, src.contiguous(), group=self.pg)
        return True


class All2allSdma(_Handle):
    """count: 32-bit words per PE, as mori's all-to-all kernel moves uint32 data."""

    def __call__(self, input_data: torch.Tensor, output_data: torch.Tensor, count: int,
                 stream: int | None = None) -> float:
        CALLS.append(("all2all", count, stream))
        if input_data.element_size() != 4:
            raise TypeError("mori stand-in: all-to-all takes 32-bit tensors")
        src = input_data.reshape(-1)[:count * self.npes]
        dst = output_data.reshape(-1)[:count * self.npes]
        tdist.all_to_all_single(dst, src.contiguous(), group=self.pg)
        return 0.0
