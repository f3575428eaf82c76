"""mcr's process group: the ranks, and the handle each library holds for them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .errors import CallError

_ids = itertools.count()


@dataclass(eq=False)
class Group:
    """A set of ranks with one communicator per library (torch process groups, an MPI comm)."""

    ranks: list[int]            # global ranks, in group-rank order
    rank: int                   # this process's rank in the group, -1 if not a member
    handles: dict[str, Any] = field(default_factory=dict)  # backend name -> PG / MPI comm
    default_gpu: str = "nccl"
    notes: dict[str, str] = field(default_factory=dict)  # backend -> why it has no handle
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def group_rank(self, global_rank: int, what: str) -> int:
        """Group rank of a global rank; CallError naming the call if it is not a member."""
        try:
            return self._index[global_rank]
        except KeyError:
            raise CallError(f"{what}: rank {global_rank} is not in this group "
                            f"(ranks {self.ranks})") from None
        except AttributeError:
            self._index = {r: i for i, r in enumerate(self.ranks)}
            return self.group_rank(global_rank, what)

    def __repr__(self) -> str:
        return f"Group(id={self.id}, ranks={self.ranks}, backends={sorted(self.handles)})"
