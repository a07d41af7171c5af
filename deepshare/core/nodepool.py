"""The simulator's node-pool mechanics: which nodes are up, and the cluster control's timers.

A dynamic cluster (the simulated autoscaler, ``deepshare/core/autoscaling/``) turns nodes up
and down and sets timers; :class:`SimNodePool` does that bookkeeping for the
:class:`~deepshare.core.simulator.Simulator`, which keeps to jobs and time. It shares the
simulator's free-GPU list (a node that is not up has no free GPUs, so no policy can place
there) and its event queue (timers are :attr:`EventKind.TIMER` events that the simulator hands
back through :meth:`SimNodePool.fire`). Without a control every node is up and nothing here
changes.

Not to be confused with :class:`deepshare.core.autoscaling.pool.NodePool`, the autoscaler's
ledger of node instances and their cost.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from deepshare.core.errors import DeepShareError
from deepshare.core.events import EventKind, EventQueue
from deepshare.core.topology import Topology


class TimerTarget(Protocol):
    """What the pool needs of a cluster control (:class:`~deepshare.core.simulator.ClusterControl`)."""

    def on_timer(self, token: int) -> None: ...


class SimNodePool:
    """Up/down state of every node of ``topology`` and the control's pending timers."""

    __slots__ = ("topology", "control", "_view_topology", "_free", "_events", "_up", "_live_timers")

    def __init__(
        self, topology: Topology, free: list[int], events: EventQueue, control: TimerTarget | None
    ) -> None:
        """``free``: the simulator's free GPUs per node, changed in place here. With a
        ``control`` every node starts down (zero free GPUs) until the control brings it up."""
        self.topology = topology
        self.control = control
        self._free = free
        self._events = events
        self._live_timers: set[int] = set()
        self._up = [control is None] * len(topology.nodes)
        self._view_topology: Topology | None = topology
        if control is not None:
            free[:] = [0] * len(topology.nodes)
            self._view_topology = None

    @property
    def view_topology(self) -> Topology:
        """The topology the policies see: nodes that are not up have zero GPUs. Built when asked
        and kept until a node goes up or down: an autoscaler bringing up thousands of nodes at
        one instant rebuilt the whole topology for each (quadratic: minutes at 4,000 nodes)."""
        found = self._view_topology
        if found is None:
            found = self._view_topology = self._up_topology()
        return found

    @property
    def up(self) -> tuple[bool, ...]:
        return tuple(self._up)

    @property
    def live_timers(self) -> int:
        """Timers set with ``keeps_alive`` that have not fired: events still to come."""
        return len(self._live_timers)

    def set_up(self, node: int, up: bool) -> None:
        """Bring node ``node`` up (its GPUs become free) or take it down (it must be idle)."""
        if self.control is None:
            raise DeepShareError("set_node_up needs a simulator built with a ClusterControl")
        if self._up[node] == up:
            return
        capacity = self.topology.capacity[node]
        if not up and self._free[node] != capacity:
            raise DeepShareError(f"cannot take down {self.topology.nodes[node].name}: it still runs jobs")
        self._up[node] = up
        self._free[node] = capacity if up else 0
        self._view_topology = None

    def schedule(self, time: float, token: int, keeps_alive: bool, now: float) -> None:
        """A TIMER event at ``time`` (>= ``now``) carrying ``token``; see :meth:`Simulator.schedule`."""
        if time < now:
            raise DeepShareError(f"cannot schedule a timer at {time} before now ({now})")
        self._events.push(time, EventKind.TIMER, "", token)
        if keeps_alive:
            self._live_timers.add(token)

    def fire(self, token: int) -> None:
        """A TIMER event popped: hand its token to the control."""
        self._live_timers.discard(token)
        assert self.control is not None
        self.control.on_timer(token)

    def _up_topology(self) -> Topology:
        if all(self._up):
            return self.topology
        nodes = tuple(n if self._up[n.index] else replace(n, gpus=0) for n in self.topology.nodes)
        return Topology(self.topology.name, nodes, self.topology.rack_uplink_gbps, self.topology.levels)
