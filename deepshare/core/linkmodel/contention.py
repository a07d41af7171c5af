"""``--contention link``: the link physics as a :class:`ContentionModel` for the simulator.

Every running job puts work on the links its placement crosses (derived from the topology
spec): the NIC of each node it spans (ring all-reduce volume ``2(k-1)/k`` for ``k`` nodes), the
PCIe fabric of each node (intra-node ring traffic plus the GPU <-> NIC copies; on NVLink nodes
the intra-node traffic rides private NVLink and only the copies touch PCIe) and, when the
spec gives rack uplinks, the uplink of each rack a multi-rack job spans. Adding or removing a
job re-solves only the jobs connected to it through shared links.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from deepshare.core.contention import RunningJob
from deepshare.core.linkmodel import physics
from deepshare.core.linkmodel.params import (
    REF_NIC_GBPS,
    REF_PCIE_GBPS,
    LinkCatalog,
    LinkParams,
    default_link_catalog,
)
from deepshare.core.topology import Node, Topology
from deepshare.core.types import DeepShareError, Prediction
from deepshare.core.workloads import Catalog


def ring_factor(k: int) -> float:
    """Ring all-reduce bytes through each of ``k`` participants per gradient byte."""
    return 2.0 * (k - 1) / k if k > 1 else 0.0


def node_works(p: LinkParams, k: int, gpus: int, node: Node) -> tuple[float, float, float]:
    """(NIC work, PCIe work, private NVLink work) of a ``k``-node job with ``gpus`` GPUs on ``node``."""
    ring = ring_factor(k)
    nic = p.nic_s * ring * REF_NIC_GBPS / node.nic_gbps
    intra = p.pcie_s * 2.0 * (gpus - 1)
    copies = p.pcie_coupling * p.nic_s * ring
    pcie_scale = REF_PCIE_GBPS / (node.intra_node_gbps * node.pcie_switches)
    if node.fabric == "nvlink" and node.nvlink_gbps > 0:
        return nic, copies * pcie_scale, intra * REF_PCIE_GBPS / node.nvlink_gbps
    return nic, (intra + copies) * pcie_scale, 0.0


@dataclass(frozen=True)
class LinkContention:
    """Bandwidth sharing on NICs, PCIe fabrics and rack uplinks (see :mod:`physics`)."""

    link_catalog: LinkCatalog | None = None
    name: str = "link"

    def new_state(self, topology: Topology, catalog: Catalog) -> "LinkState":
        return LinkState(topology, catalog, self.link_catalog or default_link_catalog())


@dataclass(frozen=True)
class _Job:
    job_id: str
    model: int
    compute: float
    overlap: float
    congestion: float
    private: float
    links: tuple[int, ...]
    works: tuple[float, ...]


class LinkState:
    def __init__(self, topology: Topology, catalog: Catalog, links: LinkCatalog) -> None:
        self._topology = topology
        self._catalog = catalog
        self._links = links
        self._model_index = {m: i for i, m in enumerate(links.models)}
        self._kappa = np.array([[links.interaction(v, a) for a in links.models] for v in links.models])
        self._rack_index = {r: i for i, r in enumerate(topology.racks)}
        self._jobs: dict[str, _Job] = {}
        self._on_link: dict[int, set[str]] = {}
        self._ratio: dict[str, float] = {}

    # -- protocol ----------------------------------------------------------------------------
    def add(self, job: RunningJob) -> set[str]:
        if job.job_id in self._jobs:
            raise DeepShareError(f"job {job.job_id!r} is already running")
        record = self._record(job)
        self._jobs[job.job_id] = record
        for link in record.links:
            self._on_link.setdefault(link, set()).add(job.job_id)
        changed = self._resolve(self._component([job.job_id]))
        changed.add(job.job_id)
        return changed

    def remove(self, job_id: str) -> set[str]:
        record = self._jobs.pop(job_id)
        del self._ratio[job_id]
        neighbours: set[str] = set()
        for link in record.links:
            sharers = self._on_link[link]
            sharers.discard(job_id)
            neighbours |= sharers
        return self._resolve(self._component(sorted(neighbours)))

    def ratio(self, job_id: str) -> float:
        return self._ratio[job_id]

    def predict(self, job: RunningJob) -> Prediction:
        record = self._record(job)
        members = self._component(sorted({o for link in record.links for o in self._on_link.get(link, ())}))
        ratios = self._solve([record, *(self._jobs[j] for j in members)])
        others: dict[str, float] = {}
        loss = 0.0
        for job_id, new in zip(members, ratios[1:]):
            old = self._ratio[job_id]
            if new != old:
                others[job_id] = new
                loss += old - new
        return Prediction(float(ratios[0]), others, loss)

    # -- internals ---------------------------------------------------------------------------
    def _record(self, job: RunningJob) -> _Job:
        name = self._links.resolve(job.model, self._catalog)
        p = self._links.params[name]
        topo = self._topology
        n_nodes = len(topo.nodes)
        k = job.placement.num_nodes
        links: list[int] = []
        works: list[float] = []
        private = 0.0
        for node_index, gpus in job.placement.alloc:
            nic_work, pcie_work, node_private = node_works(p, k, gpus, topo.nodes[node_index])
            if nic_work > 0:
                links.append(node_index)
                works.append(nic_work)
            if pcie_work > 0:
                links.append(n_nodes + node_index)
                works.append(pcie_work)
            private = max(private, node_private)
        if topo.rack_uplink_gbps > 0:
            racks = sorted({self._rack_index[topo.nodes[n].rack] for n in job.placement.nodes})
            if len(racks) > 1:
                for rack in racks:
                    links.append(2 * n_nodes + rack)
                    works.append(p.nic_s * ring_factor(len(racks)) * REF_NIC_GBPS / topo.rack_uplink_gbps)
        return _Job(
            job.job_id,
            self._model_index[name],
            p.compute_s + p.latency_s * (k - 1),
            p.overlap,
            p.congestion,
            private,
            tuple(links),
            tuple(works),
        )

    def _component(self, seeds: Iterable[str]) -> list[str]:
        """Every tracked job connected to ``seeds`` through shared links, sorted by id."""
        jobs, on_link = self._jobs, self._on_link
        seen = {s for s in seeds if s in jobs}
        stack = list(seen)
        expanded: set[int] = set()
        while stack:
            for link in jobs[stack.pop()].links:
                if link in expanded:
                    continue
                expanded.add(link)
                fresh = on_link[link] - seen
                seen |= fresh
                stack.extend(fresh)
        return sorted(seen)

    def _resolve(self, members: list[str]) -> set[str]:
        if not members:
            return set()
        ratios = self._solve([self._jobs[j] for j in members])
        changed = set()
        for job_id, value in zip(members, ratios):
            value = float(value)
            if self._ratio.get(job_id) != value:
                self._ratio[job_id] = value
                changed.add(job_id)
        return changed

    def _solve(self, jobs: list[_Job]) -> np.ndarray:
        edge_job = np.repeat(np.arange(len(jobs)), [len(j.links) for j in jobs])
        global_links = np.fromiter((l for j in jobs for l in j.links), dtype=np.int64, count=len(edge_job))
        local_links, edge_link = np.unique(global_links, return_inverse=True)
        system = physics.System(
            model=np.array([j.model for j in jobs]),
            compute=np.array([j.compute for j in jobs]),
            overlap=np.array([j.overlap for j in jobs]),
            congestion=np.array([j.congestion for j in jobs]),
            private=np.array([j.private for j in jobs]),
            edge_job=edge_job,
            edge_link=edge_link.reshape(-1),
            work=np.fromiter((w for j in jobs for w in j.works), dtype=float, count=len(edge_job)),
            n_links=len(local_links),
            kappa=self._kappa,
        )
        return physics.ratios(system)
