"""Which nodes exist, since when, and what they cost: the autoscaler's ledger.

A node *instance* lives from its request (billing starts, as clouds bill from launch) through
ready (``provisioning_s`` later: it can take jobs) to its termination. The pool hands out the
lowest free slot of a type, so runs are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepshare.core.autoscaling.spec import AutoscaleSpec, Slots
from deepshare.core.errors import DeepShareError

OFF, PENDING, UP = "off", "pending", "up"


@dataclass
class Instance:
    """One node's life; ``terminated_s`` is None while it exists."""

    node: int
    node_type: str
    gpus: int
    price_usd_per_hour: float
    requested_s: float
    ready_s: float
    terminated_s: float | None = None

    def billed_s(self, end_s: float) -> float:
        """Seconds billed up to ``end_s``: from the request until termination (or ``end_s``)."""
        stop = end_s if self.terminated_s is None else min(self.terminated_s, end_s)
        return max(0.0, stop - self.requested_s)


class NodePool:
    def __init__(self, spec: AutoscaleSpec, slots: Slots) -> None:
        self.spec = spec
        self.slots = slots
        self.state = [OFF] * len(slots.type_of)
        self.instances: list[Instance] = []
        self._current: dict[int, Instance] = {}
        self._counts: dict[tuple[str, str], int] = {}
        """Nodes per (type, state) but OFF, kept as states change: :meth:`count` is asked at every
        idle timer, and counting a type's slots each time was quadratic (minutes at 10,000 nodes)."""

    def count(self, node_type: str, states: tuple[str, ...] = (PENDING, UP)) -> int:
        if OFF in states:
            return sum(1 for n in self.slots.by_type[node_type] if self.state[n] in states)
        return sum(self._counts.get((node_type, state), 0) for state in states)

    def _set(self, node: int, state: str) -> None:
        """Node ``node`` is in ``state`` now (the counts follow)."""
        node_type = self.slots.type_of[node]
        old = self.state[node]
        if old != OFF:
            self._counts[(node_type, old)] -= 1
        if state != OFF:
            self._counts[(node_type, state)] = self._counts.get((node_type, state), 0) + 1
        self.state[node] = state

    def room(self, node_type: str) -> int:
        """How many more nodes of this type may be requested (its ``max_nodes``, and the spec's
        ``max_workers`` over every type)."""
        room = self.spec.node_types[node_type].max_nodes - self.count(node_type)
        cap = self.spec.max_workers
        if cap is not None:
            room = min(room, cap - len(self._current))  # the instances requested and not terminated
        return room

    def count_current(self) -> int:
        """Nodes requested and not terminated, over every type (what ``max_workers`` caps)."""
        return len(self._current)

    def nodes(self, state: str) -> list[int]:
        return [n for n, s in enumerate(self.state) if s == state]

    def request(self, node_type: str, now: float) -> Instance:
        """Start a node of ``node_type`` (lowest free slot); it is ready ``provisioning_s`` later."""
        t = self.spec.node_types[node_type]
        cap = self.spec.max_workers
        if cap is None or len(self._current) < cap:  # the type's own max_nodes: its slots, all taken
            for node in self.slots.by_type[node_type]:
                if self.state[node] == OFF:
                    inst = Instance(node, node_type, t.gpus, t.price_usd_per_hour, now, now + t.provisioning_s)
                    self._set(node, PENDING)
                    self.instances.append(inst)
                    self._current[node] = inst
                    return inst
        raise DeepShareError(f"no room for another {node_type!r} node (max_nodes {t.max_nodes}, max_workers {cap})")

    def mark_ready(self, node: int) -> None:
        if self.state[node] != PENDING:
            raise DeepShareError(f"node {node} is {self.state[node]}, not pending")
        self._set(node, UP)

    def terminate(self, node: int, now: float) -> Instance:
        if self.state[node] != UP:
            raise DeepShareError(f"node {node} is {self.state[node]}, not up")
        inst = self._current.pop(node)
        inst.terminated_s = now
        self._set(node, OFF)
        return inst

    def instance(self, node: int) -> Instance:
        return self._current[node]
