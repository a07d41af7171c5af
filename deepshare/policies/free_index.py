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

On a fabric, :meth:`FreeIndex.domains` keeps the free GPUs of every domain of every level the
same way (:class:`DomainFree`, built on first use and moved by :meth:`set`), so the least free
domain that holds a demand costs the domains it skips, not a sum over the cluster's nodes.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any, Callable, Hashable, Iterator, Sequence

from deepshare.core.fabric import Fabric
from deepshare.core.types import Placement


class DomainFree:
    """Free GPUs per fabric domain, bucketed by count per level (see the module doc)."""

    __slots__ = ("fabric", "sums", "_buckets")

    def __init__(self, fabric: Fabric, free: Sequence[int]) -> None:
        self.fabric = fabric
        self.sums = [0] * len(fabric.domains)
        for node, f in enumerate(free):
            if f:
                for d in fabric.node_domains[node]:
                    self.sums[d] += f
        self._buckets: list[dict[int, list[int]]] = [{} for _ in fabric.levels]
        for level, domains in enumerate(fabric.by_level):
            buckets = self._buckets[level]
            for d in domains:  # ascending: every bucket is sorted
                buckets.setdefault(self.sums[d], []).append(d)

    def move(self, node: int, delta: int) -> None:
        """Node ``node``'s free GPUs changed by ``delta``."""
        for level, d in enumerate(self.fabric.node_domains[node]):
            old = self.sums[d]
            new = old + delta
            buckets = self._buckets[level]
            bucket = buckets[old]
            del bucket[bisect_left(bucket, d)]
            if not bucket:
                del buckets[old]
            insort(buckets.setdefault(new, []), d)
            self.sums[d] = new

    def fitting(self, level: int, need: int) -> Iterator[int]:
        """Domains of ``level`` with at least ``need`` free GPUs, least free first, then by index."""
        buckets = self._buckets[level]
        for count in sorted(c for c in buckets if c >= need):
            yield from buckets[count]


_UNASKED = object()
"""A question :meth:`FreeIndex.remembered` has no answer for yet (None is an answer)."""


class FreeIndex(Sequence[int]):
    __slots__ = ("_free", "_buckets", "total", "_answers", "_domains", "_nonzero")

    def __init__(self, free: Sequence[int]) -> None:
        self._free = list(free)
        self.total = sum(self._free)
        self._buckets: dict[int, list[int]] | None = None  # built on the first question
        self._answers: dict[Hashable, Any] = {}
        self._domains: DomainFree | None = None  # built on the first fabric question
        self._nonzero: int | None = None  # nodes with a free GPU, counted on the first question

    def domains(self, fabric: Fabric) -> DomainFree:
        """The free GPUs of ``fabric``'s domains, kept up to date from now on."""
        found = self._domains
        if found is None or found.fabric is not fabric:
            found = self._domains = DomainFree(fabric, self._free)
        return found

    def remembered(self, key: Hashable, compute: Callable[..., Any], *args: Any) -> Any:
        """``compute(*args)``, remembered under ``key`` until the free GPUs change: a step of a
        decision asks the same placement question for every queued job of a size (and again
        inside other strategies); each is answered once per state of the free GPUs. ``key``
        must name everything the answer depends on besides the free GPUs. (The strategies pass
        the function and its arguments rather than a lambda, which was made at every question,
        answered already or not.)"""
        answers = self._answers
        value = answers.get(key, _UNASKED)
        if value is _UNASKED:
            value = answers[key] = compute(*args)
        return value

    @property
    def _index(self) -> dict[int, list[int]]:
        """The buckets, built on first use: a decision that asks nothing (nothing fits) pays
        only for the copy of ``free``."""
        if self._buckets is None:
            buckets: dict[int, list[int]] = {}
            for node, f in enumerate(self._free):
                if f > 0:
                    buckets.setdefault(f, []).append(node)  # appended in index order: sorted
            self._buckets = buckets
        return self._buckets

    def copy(self) -> "FreeIndex":
        other = FreeIndex.__new__(FreeIndex)
        other._free = list(self._free)
        other.total = self.total
        other._buckets = None if self._buckets is None else {f: list(n) for f, n in self._buckets.items()}
        other._answers = {}
        other._domains = None
        other._nonzero = self._nonzero
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
        if self._answers:
            self._answers = {}
        buckets = self._buckets
        if self._nonzero is not None:
            self._nonzero += (value > 0) - (old > 0)
        if buckets is not None:  # not built yet: the first question builds it from _free
            if old > 0:
                bucket = buckets[old]
                del bucket[bisect_left(bucket, node)]
                if not bucket:
                    del buckets[old]
            if value > 0:
                insort(buckets.setdefault(value, []), node)
        if self._domains is not None:
            self._domains.move(node, value - old)
        self._free[node] = value
        self.total += value - old

    def take(self, placement: Placement) -> None:
        """``placement``'s GPUs are no longer free."""
        for node, gpus in placement.alloc:
            self.set(node, self._free[node] - gpus)

    # -- questions -------------------------------------------------------------------------
    def best_single(self, need: int) -> int | None:
        """The node with the fewest free GPUs that still holds ``need``, lowest index first."""
        buckets = self._index
        fits = [f for f in buckets if f >= need]
        return buckets[min(fits)][0] if fits else None

    def ranked(self) -> Iterator[int]:
        """Nodes with free GPUs, most free first, ties by index (as ``by_most_free``)."""
        buckets = self._index
        for f in sorted(buckets, reverse=True):
            yield from buckets[f]

    def with_free(self, count: int) -> list[int]:
        """The nodes with exactly ``count`` free GPUs, by index (the index's own list: read only)."""
        return self._index.get(count, [])

    def nonzero(self) -> int:
        """How many nodes have a free GPU (counted once, then kept by :meth:`set`: ``spread``
        asks at every step of a decision)."""
        count = self._nonzero
        if count is None:
            count = self._nonzero = sum(len(nodes) for nodes in self._index.values())
        return count
