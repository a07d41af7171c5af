"""Free GPUs per node with an index by free count, updated in place as a decision launches.

A decision on a large cluster asks the same questions at every step: the best-fitting single
node for a demand, the nodes with the most free GPUs, the nodes with the same free count as a
given one. Scanning (and hashing) the whole free vector for each costs O(nodes) per question,
and a decision of thousands of launches turns that into minutes. :class:`FreeIndex` keeps, for
each free count, the sorted indices of the nodes that have it (a handful of counts: GPUs per
node), so each question walks only the nodes its answer contains, and :meth:`take` moves the
few nodes a launch touches between buckets.

It is a ``Sequence[int]`` of the free GPUs by node index too, so code written for a
plain list (the reference placements) answers the same on it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Iterator, Sequence

from deepshare.core.types import Placement


class FreeIndex(Sequence[int]):
    __slots__ = ("_free", "_buckets", "total")

    def __init__(self, free: Sequence[int]) -> None:
        self._free = list(free)
        self.total = sum(self._free)
        self._buckets: dict[int, list[int]] = {}
        for node, f in enumerate(self._free):
            if f > 0:
                self._buckets.setdefault(f, []).append(node)  # appended in index order: sorted

    def copy(self) -> "FreeIndex":
        other = FreeIndex.__new__(FreeIndex)
        other._free = list(self._free)
        other.total = self.total
        other._buckets = {f: list(nodes) for f, nodes in self._buckets.items()}
        return other

    # -- Sequence --------------------------------------------------------------------------
    def __getitem__(self, node):  # type: ignore[no-untyped-def, override]
        return self._free[node]

    def __len__(self) -> int:
        return len(self._free)

    def __iter__(self) -> Iterator[int]:
        return iter(self._free)

    def __setitem__(self, node: int, value: int) -> None:
        # Code written for a plain list may update it in place: the buckets follow.
        self.set(node, value)

    def as_tuple(self) -> tuple[int, ...]:
        return tuple(self._free)

    # -- updates ---------------------------------------------------------------------------
    def set(self, node: int, value: int) -> None:
        """Node ``node`` has ``value`` free GPUs now."""
        old = self._free[node]
        if old == value:
            return
        if old > 0:
            bucket = self._buckets[old]
            del bucket[bisect_left(bucket, node)]
            if not bucket:
                del self._buckets[old]
        if value > 0:
            insort(self._buckets.setdefault(value, []), node)
        self._free[node] = value
        self.total += value - old

    def take(self, placement: Placement) -> None:
        """``placement``'s GPUs are no longer free."""
        for node, gpus in placement.alloc:
            self.set(node, self._free[node] - gpus)

    # -- questions -------------------------------------------------------------------------
    def best_single(self, need: int) -> int | None:
        """The node with the fewest free GPUs that still holds ``need``, lowest index first."""
        fits = [f for f in self._buckets if f >= need]
        return self._buckets[min(fits)][0] if fits else None

    def ranked(self) -> Iterator[int]:
        """Nodes with free GPUs, most free first, ties by index (as ``by_most_free``)."""
        for f in sorted(self._buckets, reverse=True):
            yield from self._buckets[f]

    def with_free(self, count: int) -> list[int]:
        """The nodes with exactly ``count`` free GPUs, by index (the index's own list: read only)."""
        return self._buckets.get(count, [])

    def nonzero(self) -> int:
        """How many nodes have a free GPU."""
        return sum(len(nodes) for nodes in self._buckets.values())
