"""torch.compile and mcr: Dynamo does not trace mcr's code; its collectives enter the graph.

Traced, mcr's dispatcher would read torch ProcessGroups, which torch 2.13's Dynamo holds opaque
(a read of their attributes while tracing is a hard error), and its caches would become guards
(a recompile at every new message size). So every file of mcr is skipped, and a process group
of the `mcr` backend that torch's C++ calls from a compiled region's eager part (DDP's bucket
rebuild) runs as it is. Collectives that torch puts in a graph itself (DTensor's functional
collectives) stay there and reach the `mcr` group when the graph runs.

mcr.comm's synchronous all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast and
equal-split all_to_all_single on the world or an mcr group are not graph breaks: Dynamo meets
them as custom ops (`mcr::all_reduce_`, ...) that write their output in place, which the
compiled graph calls and CUDA graphs capture as mcr's calls may be captured. Any other form
(async_op, a torch ProcessGroup, PREMUL_SUM, split sizes) and every other mcr call is a graph
break that runs mcr as uncompiled code runs it.

Armed by mcr.comm's import; it acts when torch._dynamo is imported (importing it costs about a
second, which mcr does not add to a job that never compiles)."""

from __future__ import annotations

import warnings
from types import ModuleType, SimpleNamespace
from typing import Any

from . import alltoall, collectives
from .imports import after_import

_GROUPS: dict[int, Any] = {}  # mcr Group id -> Group, for the custom ops
# What the traced stand-ins read, as module globals (Dynamo guards them by name; closure cells of
# functions it did not see made it break): the custom ops, the reduce ops they number, mcr's
# Group class, mcr.comm's own functions (each under torch.compiler.disable).
G: dict[str, Any] = {}


def _group(gid: int) -> Any:
    """The mcr group of id gid (-1: the world), for a compiled graph's call."""
    from . import runtime
    if gid < 0:
        return None
    g = _GROUPS.get(gid)
    if g is None:
        rt = runtime.get()
        for h in (rt.world, *rt.by_pg.values()):
            _GROUPS[h.id] = h
        g = _GROUPS.get(gid)
        if g is None:
            from .errors import CallError
            raise CallError(f"a compiled graph called mcr on group id {gid}, which this mcr "
                            "session does not have (destroyed, or made by an earlier session)")
    return g


# -- what Dynamo traces in place of mcr.comm's calls (their signatures are mcr.comm's) ----------

def _gid(group: Any, async_op: bool) -> int | None:
    """The custom ops' group number (-1: the world), None where the call must break."""
    if async_op:
        return None
    if group is None:
        return -1
    return group.id if isinstance(group, G["Group"]) else None


def _redop(op: Any) -> int:
    """The custom ops' number of reduce op `op`, -1 where it has none (PREMUL_SUM)."""
    for i, o in enumerate(G["ops"]):
        if op is o:
            return i
    return -1


def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False,
               prof: bool = False, log_name: str = "all_reduce", debug: Any = None, *,
               backend: str | None = None) -> Any:
    """mcr.comm.all_reduce as Dynamo sees it."""
    op = G["SUM"] if op is None else op
    gid, code = _gid(group, async_op), _redop(op)
    if gid is None or code < 0:
        return G["all_reduce"](tensor, op, group, async_op, backend=backend)   # a graph break
    G["all_reduce_"](tensor, code, gid, backend or "")
    return None


def all_gather_into_tensor(output_tensor: Any, tensor: Any, group: Any = None,
                           async_op: bool = False, prof: bool = False,
                           log_name: str = "all_gather_into_tensor", debug: Any = None, *,
                           backend: str | None = None) -> Any:
    """mcr.comm.all_gather_into_tensor as Dynamo sees it."""
    gid = _gid(group, async_op)
    if gid is None:
        return G["all_gather_into_tensor"](output_tensor, tensor, group, async_op,
                                           backend=backend)
    G["all_gather_"](output_tensor, tensor, gid, backend or "")
    return None


def reduce_scatter_tensor(output_tensor: Any, tensor: Any, op: Any = None, group: Any = None,
                          async_op: bool = False, prof: bool = False,
                          log_name: str = "reduce_scatter_tensor", debug: Any = None, *,
                          backend: str | None = None) -> Any:
    """mcr.comm.reduce_scatter_tensor as Dynamo sees it."""
    op = G["SUM"] if op is None else op
    gid, code = _gid(group, async_op), _redop(op)
    if gid is None or code < 0:
        return G["reduce_scatter_tensor"](output_tensor, tensor, op, group, async_op,
                                          backend=backend)
    G["reduce_scatter_"](output_tensor, tensor, code, gid, backend or "")
    return None


def broadcast(tensor: Any, src: int, group: Any = None, async_op: bool = False,
              prof: bool = False, log_name: str = "broadcast", debug: Any = None, *,
              backend: str | None = None) -> Any:
    """mcr.comm.broadcast as Dynamo sees it."""
    gid = _gid(group, async_op)
    if gid is None:
        return G["broadcast"](tensor, src, group, async_op, backend=backend)
    G["broadcast_"](tensor, src, gid, backend or "")
    return None


def all_to_all_single(output: Any, tensor: Any, output_split_sizes: Any = None,
                      input_split_sizes: Any = None, group: Any = None, async_op: bool = False,
                      prof: bool = False, log_name: str = "all_to_all_single",
                      debug: Any = None, *, backend: str | None = None) -> Any:
    """mcr.comm.all_to_all_single as Dynamo sees it (equal splits in the graph)."""
    gid = _gid(group, async_op)
    if gid is None or output_split_sizes is not None or input_split_sizes is not None:
        return G["all_to_all_single"](output, tensor, output_split_sizes, input_split_sizes,
                                      group, async_op, backend=backend)
    G["all_to_all_"](output, tensor, gid, backend or "")
    return None


_STAND_INS = (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast,
              all_to_all_single)


def _in_graph() -> None:
    """The custom ops, and the stand-ins Dynamo traces in mcr.comm's functions' place."""
    import torch
    import torch.distributed as tdist

    from .groups import Group

    dist = SimpleNamespace(**{f.__name__: f for f in (
        collectives.all_reduce, collectives.all_gather_into_tensor,
        collectives.reduce_scatter_tensor, collectives.broadcast, alltoall.all_to_all_single)})

    ops = (tdist.ReduceOp.SUM, tdist.ReduceOp.AVG, tdist.ReduceOp.PRODUCT, tdist.ReduceOp.MIN,
           tdist.ReduceOp.MAX, tdist.ReduceOp.BAND, tdist.ReduceOp.BOR, tdist.ReduceOp.BXOR)
    lib = torch.library.Library("mcr", "FRAGMENT")

    def define(name: str, schema: str, fn: Any) -> None:
        # Spelled out: this module's annotations are strings (postponed evaluation).
        lib.define(f"{name}{schema} -> ()")
        lib.impl(name, fn, "CompositeExplicitAutograd")
        torch.library.register_fake(f"mcr::{name}", lambda *args: None, lib=lib)
        G[name] = getattr(torch.ops.mcr, name).default

    define("all_reduce_", "(Tensor(a!) tensor, int op, int group, str backend)",
           lambda t, op, g, b: dist.all_reduce(t, ops[op], _group(g), backend=b or None))
    define("all_gather_", "(Tensor(a!) out, Tensor inp, int group, str backend)",
           lambda o, i, g, b: dist.all_gather_into_tensor(o, i, _group(g), backend=b or None))
    define("reduce_scatter_", "(Tensor(a!) out, Tensor inp, int op, int group, str backend)",
           lambda o, i, op, g, b: dist.reduce_scatter_tensor(o, i, ops[op], _group(g),
                                                             backend=b or None))
    define("broadcast_", "(Tensor(a!) tensor, int src, int group, str backend)",
           lambda t, s, g, b: dist.broadcast(t, s, _group(g), backend=b or None))
    define("all_to_all_", "(Tensor(a!) out, Tensor inp, int group, str backend)",
           lambda o, i, g, b: dist.all_to_all_single(o, i, group=_group(g), backend=b or None))
    G.update(ops=ops, SUM=tdist.ReduceOp.SUM, Group=Group, lib=lib)
    for stand_in in _STAND_INS:
        original = getattr(dist, stand_in.__name__)
        # A graph break, not the original: Dynamo would meet the stand-in again there.
        G[stand_in.__name__] = torch.compiler.disable(original)
        torch.compiler.substitute_in_graph(original, skip_signature_check=True)(stand_in)


_READY = {"comm": False, "dynamo": False, "done": False}


def _maybe_in_graph() -> None:
    """The custom ops and stand-ins, once both mcr.comm and torch._dynamo are fully imported
    (either may come first; torch._dynamo may even be imported while torch or mcr.comm is)."""
    if _READY["comm"] and _READY["dynamo"] and not _READY["done"]:
        _READY["done"] = True
        try:
            _in_graph()
        except Exception as e:  # noqa: BLE001 - a torch without these APIs: graph breaks
            warnings.warn(f"mcr: its collectives break torch.compile graphs on this torch "
                          f"({e})", stacklevel=2)


def _on_dynamo(_dynamo: ModuleType) -> None:
    try:
        from torch._dynamo import trace_rules
        trace_rules.add("mcr")        # every file under mcr's package: skipped, not inlined
    except (ImportError, AttributeError):   # a torch without it: Dynamo traces as before
        return
    _READY["dynamo"] = True
    _maybe_in_graph()


def arm() -> None:
    """Have Dynamo skip mcr's code from the moment torch._dynamo is imported (now, if it is),
    and meet mcr.comm's collectives as custom ops (mcr.comm calls this once it is complete)."""
    _READY["comm"] = True
    after_import("torch._dynamo", _on_dynamo)


# Dynamo inlines only files it does not skip, and it skips mcr's: the stand-ins and what they
# call are filed under a name no directory has.
for _fn in (*_STAND_INS, _gid, _redop):
    _fn.__code__ = _fn.__code__.replace(co_filename="<mcr: collectives in torch.compile>")
