"""Reduce ops as frameworks hand them to mcr: PREMUL_SUM's factor across torch versions; every
other op reaches the backends as torch's own enum value (they compare by identity)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as tdist

from mcr import ops as O


class _Torch211PremulSum:
    """Stand-in for torch 2.11's ReduceOp object (a torch we cannot install here): no `factor`
    attribute, only the pickled state (PREMUL_SUM, factor), as measured on the GPU machines."""

    def __init__(self, real: tdist.ReduceOp) -> None:
        self._state = real.__getstate__()

    def __getstate__(self) -> tuple:
        return self._state


@pytest.mark.parametrize("factor", [0.25, torch.tensor([0.5])])
def test_premul_factor_with_and_without_the_factor_attribute(factor):
    real = tdist._make_nccl_premul_sum(factor)
    assert O.is_premul(real)
    for op in (real, _Torch211PremulSum(real)):
        got = O.premul_factor(op)
        assert float(got) == float(factor)


def test_premul_without_a_factor_is_refused():
    with pytest.raises(ValueError, match="needs a factor"):
        O.premul_factor(tdist.ReduceOp.PREMUL_SUM)


@pytest.mark.parametrize("op", [tdist.ReduceOp.AVG, tdist.ReduceOp(tdist.ReduceOp.AVG),
                                tdist.ReduceOp(tdist.ReduceOp.MAX), "sum"])
def test_reduce_ops_become_torchs_own_enum_values(op):
    class Named:   # another library's enum (DeepSpeed's): matched by name
        name = op
    got = O.as_redop(Named() if isinstance(op, str) else op)
    assert any(got is real for real in O.REDOP_NAMES)
    assert got == (op.op if type(op) is tdist.ReduceOp else
                   tdist.ReduceOp.SUM if isinstance(op, str) else op)
