"""The free GPUs of one fabric domain, as a read-only :class:`FreeIndex` of the whole cluster.

A job that requires one domain is placed by its strategy on that domain's free GPUs alone: the
cluster's free list with every node outside the domain at 0. Copying the cluster's list for each
such job (and then answering on a plain list, a scan of every node) cost a decision on 4,096
nodes about as much as all its other jobs together (``bench/decide_scale.py --fabric``).
:class:`MaskedFree` holds only the domain's nodes, so building it and answering on it cost the
domain's nodes, while it reads as the full-length free vector (node indices are the cluster's,
so placements and contention predictions on it need no mapping back).

It is read-only: a strategy returns a placement, it never takes GPUs from ``free`` itself.

A strategy is handed one only to place a job inside a domain of its topology request
(:func:`deepshare.policies.fabric_place.with_topology`), and ``packed`` reads it so: the fewest
nodes it waits for are then those of the request's domains
(:func:`deepshare.policies.placement.least_nodes`), on a plain list the cluster's. Every other
strategy answers a MaskedFree exactly as the masked plain list.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from deepshare.core.fabric import Fabric
from deepshare.policies.free_index import DomainFree, FreeIndex


class MaskedFree(FreeIndex):
    """``free`` with every node outside ``nodes`` at 0 (see the module doc)."""

    __slots__ = ("_values", "_size")

    def __init__(self, free: Sequence[int], nodes: Sequence[int]) -> None:  # noqa: D107 - see the class doc
        self._values = {n: free[n] for n in nodes}
        self._size = len(free)
        self._free = None  # type: ignore[assignment]  # a forgotten override fails loudly, never reads the cluster
        self.total = sum(self._values.values())
        self._buckets = None
        self._answers = {}
        self._domains = None
        self._nonzero = None

    @property
    def _index(self) -> dict[int, list[int]]:
        if self._buckets is None:
            buckets: dict[int, list[int]] = {}
            for node in sorted(self._values):
                f = self._values[node]
                if f > 0:
                    buckets.setdefault(f, []).append(node)
            self._buckets = buckets
        return self._buckets

    def domains(self, fabric: Fabric) -> DomainFree:
        """The free GPUs of the domains that hold the masked nodes (no other domain fits anything)."""
        found = self._domains
        if found is None or found.fabric is not fabric:
            found = self._domains = _domain_free(fabric, self._values)
        return found

    def __getitem__(self, node):  # type: ignore[no-untyped-def, override]
        if isinstance(node, slice):
            return list(self)[node]
        if node < 0:
            node += self._size
        if not 0 <= node < self._size:
            raise IndexError(node)
        return self._values.get(node, 0)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[int]:
        values = self._values
        return (values.get(n, 0) for n in range(self._size))

    def as_tuple(self) -> tuple[int, ...]:
        return tuple(self)

    def copy(self) -> FreeIndex:
        return FreeIndex(list(self))

    def set(self, node: int, value: int) -> None:
        raise TypeError("a MaskedFree is read-only: place on it, take the GPUs from the cluster's free list")


def _domain_free(fabric: Fabric, values: dict[int, int]) -> DomainFree:
    """A :class:`DomainFree` of the domains over ``values``' nodes only (the others hold nothing)."""
    out = DomainFree.__new__(DomainFree)
    out.fabric = fabric
    sums = out.sums = [0] * len(fabric.domains)
    touched: set[tuple[int, int]] = set()
    for node, f in values.items():
        for level, d in enumerate(fabric.node_domains[node]):
            sums[d] += f
            touched.add((level, d))
    buckets: list[dict[int, list[int]]] = [{} for _ in fabric.levels]
    for level, d in sorted(touched):  # ascending domain index within a level: every bucket sorted
        buckets[level].setdefault(sums[d], []).append(d)
    out._buckets = buckets  # type: ignore[attr-defined]
    return out
