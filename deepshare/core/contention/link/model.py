"""``--contention link``: the link physics as a :class:`ContentionModel` for the simulator.

Every running job puts work on the links its placement crosses (derived from the topology
spec): the NIC of each node it spans (ring all-reduce volume ``2(k-1)/k`` for ``k`` nodes), the
PCIe fabric of each node (intra-node ring traffic plus the GPU <-> NIC copies; on NVLink nodes
the intra-node traffic rides private NVLink and only the copies touch PCIe) and the uplink of
every fabric domain it spans at every level (:mod:`deepshare.core.fabric`): a job spanning
``m > 1`` domains of a level puts ring volume ``2(m-1)/m`` on each of their uplinks, over the
uplink's bandwidth (an oversubscribed leaf has less). Without fabric levels the one level is the
racks and ``rack_uplink_gbps``, as before levels existed.

**Traffic patterns on uplinks.** A ring crosses each spanned domain's boundary once, so the
uplink carries one node's volume of it. An all-to-all (MoE expert parallelism across nodes, the
``all_to_all_s`` part of a model's ``nic_s``) does not: each of the job's ``k`` nodes sends its
volume evenly to the ``k - 1`` others, so a domain holding ``n`` of them puts
``n (k - n) / (k - 1)`` nodes' all-to-all volume on its uplink (an 8:8 split: four nodes' worth,
not one). Models without ``all_to_all_s`` (every fitted one) are all ring, as before.

**ECMP ports.** A level may give ``port_gbps``, the bandwidth of one switch port of its uplinks.
Such an uplink is ``P = round(uplink_gbps / port_gbps)`` links of ``uplink_gbps / P`` each (named
``DOMAIN/uplink/pN``), not one fat pipe. A job crossing the boundary sends its ring volume on the
crossing node's rails, ``max(1, ceil(nic_gbps / port_gbps))`` flows (8 on an 8 x 400G node
over 400G ports; the job's first node in the domain, times its nodes in that node's NVLink
domain where a hierarchical collective spreads the crossing over them), and its all-to-all
volume on the rails of all its nodes in the domain. Each flow carries an equal share and is
hashed onto one port by a stable hash (:func:`ecmp_port`: ``zlib.crc32`` of the job id, the
domain's name and the flow's index, mixed so that flows draw independently; never Python's
salted ``hash``): two of the job's own flows
on one port double its work there, in its isolated time as in its shared one, so its ratio alone
stays 1 (its speed alone, the catalog's throughput times the ratio, does not change): a
self-collision changes how the job contends with others on that port, not its isolated speed;
another job's flow on the same port is contention, solved like any shared link. Per-port work
is the port's flows' volume over the port's bandwidth. The rails are rounded up, so a flow
carries at most a port's bandwidth: on an uplink of whole ports (``uplink_gbps / P =
port_gbps``) a port without collisions has at most the job's NIC work, never the bottleneck of
a job alone (equal when ``nic_gbps`` is a multiple of ``port_gbps``). Without ``port_gbps`` (the default) an
uplink is one fat pipe, perfectly balanced, bit for bit as before ports existed.

**NVLink domains that span nodes** (a GB200 NVL72 rack): traffic between the job's nodes inside
one domain rides that domain's NVLink, private to the job (no NIC, no switch); across ``m``
domains the collective is hierarchical (reduce inside each domain over NVLink, ring across the
domains over NICs), and each domain's share of the cross-domain volume is split among the job's
nodes there. So the split's shape matters: a 15:1 split funnels the cross-domain traffic of one
side through one node's NICs, where an 8:8 split spreads it over eight (hand-checked in the
tests). Inter-node volumes are scaled by the model's placement-shape factor
(:func:`params.shape_factor`) with the GPUs the job has on that node. Adding or removing a job
re-solves only the jobs connected to it through shared links.

**Hardware.** A model's ``compute_s`` is its compute time per iteration on the testbed's TITAN
Xp; a job computes ``compute_s / speed`` where ``speed`` is the training speed
(:func:`deepshare.core.hardware.gpu_speed`) of the slowest GPU model among its nodes (synchronous
training waits for the slowest). Its communication works already scale with the links' bandwidth
and its ``latency_s`` is kept as it is. A TITAN Xp or unknown ``gpu_model`` has speed 1: the
compute time is ``compute_s`` itself, bit for bit. ``LinkContention(hardware_scaling=False)``
ignores the GPU models (every node at the reference speed), as before the hardware table.
"""

from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link import physics
from deepshare.core.contention.link.params import (
    REF_NIC_GBPS,
    REF_PCIE_GBPS,
    LinkCatalog,
    LinkParams,
    default_link_catalog,
    shape_factor,
)
from deepshare.core.errors import DeepShareError
from deepshare.core.hardware import gpu_speed
from deepshare.core.topology import Node, Topology
from deepshare.core.view import Prediction
from deepshare.core.workloads import Catalog


def ring_factor(k: int) -> float:
    """Ring all-reduce bytes through each of ``k`` participants per gradient byte."""
    return 2.0 * (k - 1) / k if k > 1 else 0.0


def node_works(p: LinkParams, k: int, gpus: int, node: Node, domains: int = 0,
               domain_nodes: int = 1) -> tuple[float, float, float]:
    """(NIC work, PCIe work, private NVLink work) of a ``k``-node job with ``gpus`` GPUs on ``node``.

    ``domains``: without NVLink domains spanning nodes, 0. Otherwise the NVLink domains the job
    spans, ``domain_nodes`` of its nodes in this node's one: inter-node traffic inside the domain
    rides NVLink, and this node carries ``1 / domain_nodes`` of its domain's cross-domain ring
    volume (see the module doc)."""
    ring = ring_factor(k) * shape_factor(p, k, gpus) if k > 1 else 0.0
    intra = p.pcie_s * 2.0 * (gpus - 1)
    pcie_scale = REF_PCIE_GBPS / (node.intra_node_gbps * node.pcie_switches)
    nvlink = node.fabric == "nvlink" and node.nvlink_gbps > 0
    if domains:
        cross = ring_factor(domains) * shape_factor(p, domains, gpus) / domain_nodes if domains > 1 else 0.0
        inside = ring_factor(domain_nodes) * shape_factor(p, domain_nodes, gpus) if domain_nodes > 1 else 0.0
        nic = p.nic_s * cross * REF_NIC_GBPS / node.nic_gbps
        copies = p.pcie_coupling * p.nic_s * cross
        private = (intra * REF_PCIE_GBPS + p.nic_s * inside * REF_NIC_GBPS) / node.nvlink_gbps if nvlink else 0.0
        return nic, (copies if nvlink else intra + copies) * pcie_scale, private
    nic = p.nic_s * ring * REF_NIC_GBPS / node.nic_gbps
    copies = p.pcie_coupling * p.nic_s * ring
    if nvlink:
        return nic, copies * pcie_scale, intra * REF_PCIE_GBPS / node.nvlink_gbps
    return nic, (intra + copies) * pcie_scale, 0.0


def uplink_ports(uplink_gbps: float, port_gbps: float) -> int:
    """The ECMP ports of an uplink of ``uplink_gbps`` made of ``port_gbps`` ports: ``round(uplink /
    port)``, at least 1; 0 (one fat pipe) when the level has no ports or the uplink is
    non-blocking."""
    if port_gbps <= 0 or uplink_gbps <= 0:
        return 0
    return max(1, round(uplink_gbps / port_gbps))


def node_rails(nic_gbps: float, port_gbps: float) -> int:
    """The flows a node sends across a boundary of ``port_gbps`` ports: its rails,
    ``ceil(nic_gbps / port_gbps)``, at least 1 (8 for 8 x 400G NICs on 400G ports; 3 for 1000G
    on 400G ports). Rounded up, each flow carries at most a port's bandwidth (``nic_gbps /
    rails <= port_gbps``), so without collisions a port's work is at most the NIC's: rounded to
    nearest (2 for 1000G), two flows of 500G on 400G ports made a collision-free port the
    bottleneck of a job alone. A quotient within 1e-9 of a whole number is that number (a
    multiple of the port whose division rounds a hair above it is not one rail more)."""
    rails = nic_gbps / port_gbps
    whole = round(rails)
    return max(1, whole if math.isclose(rails, whole, rel_tol=1e-9) else math.ceil(rails))


def _fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser: every output bit depends on every input bit, non-linearly."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def ecmp_port(job_id: str, domain: str, flow: int, ports: int) -> int:
    """The port of ``ports`` that flow ``flow`` of job ``job_id`` crossing ``domain``'s uplink is
    hashed onto: ``zlib.crc32`` of the three (``job_id``, NUL, ``domain``, NUL, the flow's
    decimal index), mixed by MurmurHash3's 32-bit finaliser, modulo the ports. Stable across
    processes and runs (Python's ``hash`` of a string is salted per process, so it is never used
    here).

    The finaliser matters: CRC-32 is affine over GF(2), so the CRCs of two keys that differ only
    in the flow index differ by the same bits for every job. Taken modulo a power of two, a job's
    flows would then all collide or none would, and two jobs whose first flows collide would
    collide on every flow (the "hash polarisation" of real switches, but not the independent
    draw this model means). The finaliser's multiplications break the linearity: a job's 8 flows
    on 128 ports collide with probability about 0.20, as independent draws do."""
    return _fmix32(zlib.crc32(f"{job_id}\x00{domain}\x00{flow}".encode())) % ports


@lru_cache(maxsize=1 << 16)
def flow_ports(job_id: str, domain: str, first: int, count: int, ports: int) -> tuple[int, ...]:
    """:func:`ecmp_port` of flows ``first .. first + count - 1``, remembered: a placement search
    asks for the same job's flows across the same domains many times."""
    prefix = zlib.crc32(f"{job_id}\x00{domain}\x00".encode())
    return tuple(_fmix32(zlib.crc32(str(flow).encode(), prefix)) % ports for flow in range(first, first + count))


def ecmp_loads(job_id: str, domain: str, ports: int, ring_volume: float, ring_flows: int,
               a2a_volume: float, a2a_flows: int) -> dict[int, float]:
    """Per port, the volume a job's flows put on a ``ports``-port uplink: ``ring_flows`` flows
    (numbered 0..) carrying ``ring_volume`` equally, then ``a2a_flows`` flows (numbered on)
    carrying ``a2a_volume`` equally, each on the port :func:`ecmp_port` gives it. Flows of the
    job on one port add up (its own collision: in its isolated time as in its shared one, so it
    changes how the job contends on that port, not its ratio alone)."""
    load: dict[int, float] = {}
    if ring_volume > 0:
        share = ring_volume / ring_flows
        for port in flow_ports(job_id, domain, 0, ring_flows, ports):
            load[port] = load.get(port, 0.0) + share
    if a2a_volume > 0:
        share = a2a_volume / a2a_flows
        for port in flow_ports(job_id, domain, ring_flows, a2a_flows, ports):
            load[port] = load.get(port, 0.0) + share
    return load


@dataclass(frozen=True)
class LinkContention:
    """Bandwidth sharing on NICs, PCIe fabrics and rack uplinks (see :mod:`physics`)."""

    link_catalog: LinkCatalog | None = None
    name: str = "link"
    hardware_scaling: bool = True
    """Compute at each node's GPU speed (:mod:`deepshare.core.hardware`); False: every node at the
    TITAN Xp reference speed (the model before the hardware table, for comparisons)."""

    def new_state(self, topology: Topology, catalog: Catalog) -> "LinkState":
        return LinkState(topology, catalog, self.link_catalog or default_link_catalog(),
                         hardware_scaling=self.hardware_scaling)


@dataclass(frozen=True)
class _Job:
    job_id: str
    model: int
    compute: float
    overlap: float
    congestion: float
    sensitivity: float
    private: float
    links: tuple[int, ...]
    works: tuple[float, ...]
    link_array: np.ndarray
    work_array: np.ndarray


class LinkState:
    """The running jobs, the jobs on each link, and the connected components they form.

    Components (jobs linked through shared links, transitively) are kept up to date: adding a
    job merges the components it touches; removing one re-solves what is left of its component
    and splits it where the job was the only bridge (a label propagation over the arrays the
    solve builds anyway). A component is always solved as one system with its jobs sorted by
    id, so the ratios do not depend on the order jobs came and went. Each job's scalars live in
    a row of per-state arrays (its *slot*), so assembling a component's system is a few
    gathers and one concatenation of the jobs' edge arrays.
    """

    def __init__(self, topology: Topology, catalog: Catalog, links: LinkCatalog,
                 hardware_scaling: bool = True) -> None:
        self._topology = topology
        speeds = [gpu_speed(n.gpu_model) if hardware_scaling else 1.0 for n in topology.nodes]
        self._speed: list[float] | None = speeds if any(s != 1.0 for s in speeds) else None
        """Per node, its GPU's speed relative to the reference; None when every node has speed 1."""
        self._catalog = catalog
        self._links = links
        self._model_index = {m: i for i, m in enumerate(links.models)}
        self._kappa = np.array([[links.interaction(v, a) for a in links.models] for v in links.models])
        self._fabric = fabric = topology.fabric
        n_nodes = len(topology.nodes)
        # Per domain: the index of its uplink's first link and its ECMP ports (0: one fat pipe,
        # one link). Without ports anywhere, domain d's uplink is link 2 * n_nodes + d, as always.
        self._uplink_base: list[int] = []
        self._ports: list[int] = []
        base = 2 * n_nodes
        for domain in fabric.domains:
            ports = uplink_ports(domain.uplink_gbps, fabric.levels[domain.level].port_gbps)
            self._uplink_base.append(base)
            self._ports.append(ports)
            base += max(1, ports)
        self._n_links = base
        self._rails: list[tuple[int, ...] | None] = [
            tuple(node_rails(n.nic_gbps, level.port_gbps) for n in topology.nodes) if level.port_gbps > 0 else None
            for level in fabric.levels]
        """Per level with ports: each node's rails (flows it sends across a boundary); else None."""
        self._jobs: dict[str, _Job] = {}
        self._on_link: dict[int, set[str]] = {}
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._rows = np.zeros((0, 6))           # per slot: model, compute, overlap, congestion, sensitivity, private
        self._ratios = np.zeros(0)              # per slot
        self._comp_of: dict[str, int] = {}
        self._order: dict[int, list[str]] = {}  # component -> its jobs, sorted by id
        self._next_comp = 0
        self._background: np.ndarray | None = None  # per global link: unmanaged load (set_background)

    # -- what a probe reads, and load it cannot explain ------------------------------------------
    def link_names(self) -> list[str]:
        """Each global link's name, by index: ``NODE/nic``, ``NODE/pcie``, ``DOMAIN/uplink`` (a
        fabric domain's path, ``spine0/leaf3/uplink``; ``RACK/uplink`` without levels: the names
        ``ClusterView.link_load`` and the node agents use). The uplink of a domain whose level
        has ECMP ports (``port_gbps``) is one link per port instead: ``DOMAIN/uplink/p0`` ..
        ``DOMAIN/uplink/p{P-1}``."""
        nodes = self._topology.nodes
        names = [f"{n.name}/nic" for n in nodes] + [f"{n.name}/pcie" for n in nodes]
        for domain, ports in zip(self._fabric.domains, self._ports):
            if ports:
                names += [f"{domain.name}/uplink/p{j}" for j in range(ports)]
            else:
                names.append(f"{domain.name}/uplink")
        return names

    def link_loads(self) -> dict[str, float]:
        """Utilisation (0..1) of every link some running job crosses, by name: the bandwidth its
        jobs use over its capacity at the model's fixed point (what the simulated probe reports)."""
        names = self.link_names()
        out: dict[str, float] = {}
        for comp in sorted(self._order):
            members = self._order[comp]
            system = self._system(members)
            present = sorted({link for j in members for link in self._jobs[j].links})
            for link, load in zip(present, physics.link_loads(system).tolist()):
                out[names[link]] = load
        return out

    def set_background(self, loads: dict[str, float]) -> None:
        """Load on links that no tracked job explains (by link name, 0..1; unknown names are
        ignored), added to every stretch on those links from now on. Set before any job is added:
        the ratios of jobs already tracked are not re-solved. On an uplink with ECMP ports,
        ``DOMAIN/uplink`` (what a probe of the whole uplink reads) applies its load to every port
        (unmanaged traffic is taken as hashed evenly over them); ``DOMAIN/uplink/pN`` sets one
        port, and wins over the whole uplink's figure for that port."""
        if self._jobs:
            raise DeepShareError("set_background: set it before any job is added")
        index = {name: [i] for i, name in enumerate(self.link_names())}
        uplinks: set[str] = set()  # the names of whole uplinks with ports (one port: one link, still whole)
        for domain, base, ports in zip(self._fabric.domains, self._uplink_base, self._ports):
            if ports:
                uplinks.add(name := f"{domain.name}/uplink")
                index[name] = list(range(base, base + ports))
        background = np.zeros(self._n_links)
        for whole in (True, False):  # whole uplinks first, so a port's own figure wins
            for name, load in loads.items():
                links = index.get(name)
                if links is None or load <= 0 or (name in uplinks) != whole:
                    continue
                background[links] = min(float(load), 1.0)
        self._background = background if background.any() else None

    # -- protocol ----------------------------------------------------------------------------
    def add(self, job: RunningJob) -> set[str]:
        if job.job_id in self._jobs:
            raise DeepShareError(f"job {job.job_id!r} is already running")
        record = self._record(job)
        comps = self._touched(record)
        self._jobs[job.job_id] = record
        self._take_slot(record)
        for link in record.links:
            self._on_link.setdefault(link, set()).add(job.job_id)
        if comps:  # merge into the largest component touched
            keep = max(comps, key=lambda c: (len(self._order[c]), -c))
            order = self._order[keep]
            others = sorted(comps - {keep})
            if others:
                for comp in others:
                    for other in self._order.pop(comp):
                        self._comp_of[other] = keep
                        order.append(other)
                order.sort()
            bisect.insort(order, job.job_id)
        else:
            keep, order = self._new_component([job.job_id])
        self._comp_of[job.job_id] = keep
        changed = self._store(order, physics.ratios(self._system(order)))
        changed.add(job.job_id)
        return changed

    def remove(self, job_id: str) -> set[str]:
        record = self._jobs.pop(job_id)
        self._free.append(self._slot.pop(job_id))
        for link in record.links:
            sharers = self._on_link[link]
            sharers.discard(job_id)
            if not sharers:
                del self._on_link[link]
        order = self._order.pop(self._comp_of.pop(job_id))
        order.remove(job_id)
        if not order:
            return set()
        system = self._system(order)
        changed = self._store(order, physics.ratios(system))
        labels = _components(system)
        if not labels.any():  # still one piece
            self._new_component(order)
        else:
            for label in np.unique(labels):
                self._new_component([order[i] for i in np.flatnonzero(labels == label).tolist()])
        return changed

    def ratio(self, job_id: str) -> float:
        return float(self._ratios[self._slot[job_id]])

    def predict(self, job: RunningJob) -> Prediction:
        record = self._record(job)
        # a job already running is predicted at the placement asked, not beside its own record
        # (as the profiled model does): it had counted against itself
        members = sorted(j for c in self._touched(record) for j in self._order[c] if j != job.job_id)
        at = bisect.bisect_left(members, job.job_id)  # where add would put it: the same sums, bit for bit
        slot = self._take_slot(record, register=False)
        try:
            ratios = physics.ratios(self._system(members, extra=(record, slot, at))).tolist()
        finally:
            self._free.append(slot)
        mine = ratios.pop(at)
        others: dict[str, float] = {}
        loss = 0.0
        for job_id, new in zip(members, ratios):
            old = self.ratio(job_id)
            if new != old:
                others[job_id] = new
                loss += old - new
        return Prediction(mine, others, loss)

    # -- internals ---------------------------------------------------------------------------
    def _touched(self, record: "_Job") -> set[int]:
        comp_of = self._comp_of
        return {comp_of[o] for link in record.links for o in self._on_link.get(link, ())}

    def _new_component(self, order: list[str]) -> tuple[int, list[str]]:
        comp = self._next_comp
        self._next_comp += 1
        self._order[comp] = order
        for job_id in order:
            self._comp_of[job_id] = comp
        return comp, order

    def _take_slot(self, record: "_Job", register: bool = True) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._slot) + len(self._free)
            if slot >= len(self._rows):
                grow = max(16, 2 * len(self._rows))
                self._rows = np.concatenate([self._rows, np.zeros((grow, 6))])
                self._ratios = np.concatenate([self._ratios, np.zeros(grow)])
        self._rows[slot] = (record.model, record.compute, record.overlap, record.congestion, record.sensitivity, record.private)
        if register:
            self._slot[record.job_id] = slot
        return slot

    def _record(self, job: RunningJob) -> _Job:
        name = self._links.resolve(job.model, self._catalog)
        p = self._links.params[name]
        topo = self._topology
        n_nodes = len(topo.nodes)
        k = job.placement.num_nodes
        fabric = self._fabric
        links: list[int] = []
        works: list[float] = []
        private = 0.0
        in_domain: dict[int, int] = {}  # NVLink domain -> the job's nodes there
        if fabric.nvlink_level is not None and k > 1:
            for node_index in job.placement.nodes:
                d = fabric.node_domains[node_index][0]
                in_domain[d] = in_domain.get(d, 0) + 1
        for node_index, gpus in job.placement.alloc:
            if in_domain:
                nic_work, pcie_work, node_private = node_works(
                    p, k, gpus, topo.nodes[node_index], len(in_domain), in_domain[fabric.node_domains[node_index][0]])
            else:
                nic_work, pcie_work, node_private = node_works(p, k, gpus, topo.nodes[node_index])
            if nic_work > 0:
                links.append(node_index)
                works.append(nic_work)
            if pcie_work > 0:
                links.append(n_nodes + node_index)
                works.append(pcie_work)
            private = max(private, node_private)
        if k > 1:
            shape = shape_factor(p, k, job.placement.total_gpus / k)
            domains = fabric.domains
            a2a = p.all_to_all_s
            for level in range(len(fabric.levels)):
                spanned = fabric.spanned(job.placement.nodes, level)
                if len(spanned) < 2:
                    continue
                ring = ring_factor(len(spanned))
                rails = self._rails[level]
                if not a2a and rails is None:  # a ring on fat pipes: one node's volume per boundary
                    for d in spanned:
                        uplink = domains[d].uplink_gbps
                        if uplink > 0:
                            links.append(self._uplink_base[d])
                            works.append(p.nic_s * ring * shape * REF_NIC_GBPS / uplink)
                    continue
                inside: dict[int, list[int]] = {}
                for node_index in sorted(job.placement.nodes):
                    inside.setdefault(fabric.node_domains[node_index][level], []).append(node_index)
                for d in spanned:
                    uplink = domains[d].uplink_gbps
                    if uplink <= 0:
                        continue
                    members = inside[d]
                    ring_volume = (p.nic_s - a2a) * ring * shape
                    a2a_volume = a2a * 2.0 * len(members) * (k - len(members)) / k * shape
                    ports = self._ports[d]
                    if not ports:
                        links.append(self._uplink_base[d])
                        works.append((ring_volume + a2a_volume) * REF_NIC_GBPS / uplink)
                        continue
                    first = members[0]  # the ring's crossing node: the job's first node in d
                    ring_flows = rails[first] * (in_domain[fabric.node_domains[first][0]] if in_domain else 1)
                    a2a_flows = sum(rails[n] for n in members) if a2a_volume > 0 else 0
                    load = ecmp_loads(job.job_id, domains[d].name, ports, ring_volume, ring_flows, a2a_volume, a2a_flows)
                    base, per_port = self._uplink_base[d], uplink / ports
                    for port in sorted(load):
                        links.append(base + port)
                        works.append(load[port] * REF_NIC_GBPS / per_port)
        compute = p.compute_s
        if self._speed is not None:
            speed = min(self._speed[i] for i in job.placement.nodes)
            if speed != 1.0:
                compute = compute / speed
        return _Job(
            job.job_id,
            self._model_index[name],
            compute + p.latency_s * (k - 1),
            p.overlap,
            p.congestion,
            self._links.placement_sensitivity(name, job.placement.total_gpus, k),
            private,
            tuple(links),
            tuple(works),
            np.array(links, dtype=np.int64),
            np.array(works, dtype=float),
        )

    def _resolve(self, members: list[str]) -> set[str]:
        if not members:
            return set()
        return self._store(members, physics.ratios(self._system(members)))

    def _store(self, members: list[str], ratios: np.ndarray) -> set[str]:
        slots = np.fromiter((self._slot[j] for j in members), dtype=np.int64, count=len(members))
        fresh = self._ratios[slots] != ratios
        self._ratios[slots] = ratios
        return {members[i] for i in np.flatnonzero(fresh).tolist()}

    def _system(self, members: list[str], extra: tuple[_Job, int, int] | None = None) -> physics.System:
        """The system of the tracked ``members`` with ``extra`` (an untracked job, its slot and its
        index among them) inserted."""
        slot_of = self._slot
        records = [self._jobs[j] for j in members]
        slots = np.fromiter((slot_of[j] for j in members), dtype=np.int64, count=len(members))
        if extra is not None:
            record, slot, at = extra
            records.insert(at, record)
            slots = np.insert(slots, at, slot)
        counts = np.fromiter((len(r.links) for r in records), dtype=np.int64, count=len(records))
        edge_job = np.repeat(np.arange(len(records)), counts)
        if len(edge_job):
            global_links = np.concatenate([r.link_array for r in records])
            work = np.concatenate([r.work_array for r in records])
        else:
            global_links, work = np.zeros(0, dtype=np.int64), np.zeros(0)
        present = np.zeros(self._n_links, dtype=np.int64)
        present[global_links] = 1
        local = np.cumsum(present) - 1
        rows = self._rows[slots]
        background = None
        if self._background is not None and len(local):
            background = np.zeros(int(local[-1] + 1))
            background[local[global_links]] = self._background[global_links]
        return physics.System(
            model=rows[:, 0].astype(np.int64),
            compute=rows[:, 1],
            overlap=rows[:, 2],
            congestion=rows[:, 3],
            private=rows[:, 5],
            edge_job=edge_job,
            edge_link=local[global_links],
            work=work,
            n_links=int(local[-1] + 1) if len(local) else 0,
            kappa=self._kappa,
            sensitivity=rows[:, 4],
            background=background,
        )


def _components(system: physics.System) -> np.ndarray:
    """A label per job: jobs with equal labels are connected through shared links."""
    labels = np.arange(len(system.model))
    if not len(system.edge_job):
        return labels
    jobs, links = system.edge_job, system.edge_link
    while True:
        on_link = np.full(system.n_links, len(labels))
        np.minimum.at(on_link, links, labels[jobs])
        new = labels.copy()
        np.minimum.at(new, jobs, on_link[links])
        new = new[new]  # pointer jumping: follow labels to their own labels
        if np.array_equal(new, labels):
            return labels
        labels = new
