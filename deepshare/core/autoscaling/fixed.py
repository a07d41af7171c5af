"""The no-autoscaling reference: every node up from t = 0 and never removed (each type's
``min_nodes``, then ``max_nodes`` each, types in the spec's order, as far as ``max_workers``
allows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepshare.core.autoscaling.autoscaler import Autoscaler
from deepshare.core.autoscaling.pool import UP
from deepshare.core.types import Decision
from deepshare.core.view import ClusterView

if TYPE_CHECKING:  # pragma: no cover
    from deepshare.core.simulator import Simulator


class FixedCluster(Autoscaler):
    name = "fixed"

    def attach(self, sim: "Simulator") -> None:
        self._sim = sim
        every = {name: t.min_nodes for name, t in self.spec.node_types.items()}  # min_nodes first: "always up"
        for counts in (every, {name: None for name in self.spec.node_types}):
            for node_type, wanted in counts.items():
                for _ in range(self.pool.room(node_type) if wanted is None else wanted):  # room() counted once
                    inst = self.pool.request(node_type, 0.0)
                    inst.ready_s = 0.0
                    self.pool.mark_ready(inst.node)
                    sim.set_node_up(inst.node, True)
        self.on_change()

    def most_gpus(self) -> int:
        """Its nodes are all up from t = 0: what they hold."""
        capacity = self.slots.topology.capacity
        return sum(capacity[n] for n in self.pool.nodes(UP))

    def rack_gpus(self) -> dict[str, int]:
        """What each rack's nodes hold (all up from t = 0): a job that requires one rack can have no more."""
        capacity, held = self.slots.topology.capacity, dict.fromkeys(self._rack_nodes, 0)
        for n in self.pool.nodes(UP):
            held[self._rack_of[n]] += capacity[n]
        return held

    def _removable(self, node: int) -> bool:
        return False

    def review(self, view: ClusterView, decision: Decision) -> Decision:
        return decision
