"""The no-autoscaling reference: every node up from t = 0 and never removed (``max_nodes`` each,
types in the spec's order, as far as ``max_workers`` allows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepshare.core.autoscaling.autoscaler import Autoscaler
from deepshare.core.types import Decision
from deepshare.core.view import ClusterView

if TYPE_CHECKING:  # pragma: no cover
    from deepshare.core.simulator import Simulator


class FixedCluster(Autoscaler):
    name = "fixed"

    def attach(self, sim: "Simulator") -> None:
        self._sim = sim
        for node_type in self.spec.node_types:
            for _ in range(self.pool.room(node_type)):  # counted once: room() walks the type's slots
                inst = self.pool.request(node_type, 0.0)
                inst.ready_s = 0.0
                self.pool.mark_ready(inst.node)
                sim.set_node_up(inst.node, True)
        self.on_change()

    def _removable(self, node: int) -> bool:
        return False

    def review(self, view: ClusterView, decision: Decision) -> Decision:
        return decision
