"""A probe that replays link loads instead of measuring them: for tests, demos and dry runs.

Loads are ``{link: utilisation}`` snapshots, e.g. what the simulator's link model computes, or
come from a callback called once per sample. With ``node`` set, keys are ClusterView-style
(``node0/nic``) and only this node's links are kept, with the ``node0/`` prefix removed, so one
cluster-wide sequence can drive every node's agent. Readings are device-style rates: rx = tx =
utilisation x capacity, so the computed utilisation is the replayed one.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Sequence

from deepshare.agents.probes.base import Clock, Probe, ProbeError
from deepshare.agents.samples import LinkReading, ProbeSample

Loads = Mapping[str, float]


class SimulatedProbe(Probe):
    """Replays ``snapshots`` in order (cycling when ``loop``), or calls ``source()`` each sample."""

    name = "simulated"

    def __init__(
        self,
        snapshots: Sequence[Loads] = (),
        source: Callable[[], Loads] | None = None,
        node: str | None = None,
        capacity_bytes_per_s: float = 1e9,
        loop: bool = True,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(clock)
        if (source is None) == (not snapshots):
            raise ValueError("SimulatedProbe needs either snapshots or a source callback")
        self._snapshots = [dict(s) for s in snapshots]
        self._source = source
        self._node = node
        self._capacity = capacity_bytes_per_s
        self._loop = loop
        self._next = 0

    def _loads(self) -> Loads:
        if self._source is not None:
            return self._source()
        if self._next >= len(self._snapshots):
            if not self._loop:
                raise ProbeError("simulated: no snapshots left to replay")
            self._next = 0
        loads = self._snapshots[self._next]
        self._next += 1
        return loads

    def _read(self) -> ProbeSample:
        now = self.clock()
        loads = self._loads()
        if self._node is not None:
            prefix = f"{self._node}/"
            loads = {k[len(prefix):]: v for k, v in loads.items() if k.startswith(prefix)}
        links = {
            link: LinkReading(u * self._capacity, u * self._capacity, "rate", capacity_bytes_per_s=self._capacity)
            for link, u in loads.items()
        }
        return ProbeSample(now, links)


class ReplayProbes:
    """A picklable probe factory for agents: each node replays its own slice of ``snapshots``.

    ``snapshots`` use ClusterView keys (``node0/nic``), so one sequence, e.g. link loads the
    simulator produced, drives a whole (possibly fake) cluster.
    """

    def __init__(self, snapshots: Sequence[Loads], capacity_bytes_per_s: float = 1e9) -> None:
        self.snapshots = [dict(s) for s in snapshots]
        self.capacity_bytes_per_s = capacity_bytes_per_s

    def __call__(self, node_name: str, node_spec: object = None) -> list[Probe]:
        return [SimulatedProbe(self.snapshots, node=node_name, capacity_bytes_per_s=self.capacity_bytes_per_s)]
