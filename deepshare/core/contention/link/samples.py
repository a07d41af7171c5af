"""Throughput samples recorded on a live cluster, turned into profiles to calibrate from.

The node agents and the live scheduler record what jobs actually achieved. A samples CSV has
one row per measurement::

    model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s
    MoE,4,2,,,,17.1              <- alone (co_* empty)
    MoE,4,2,FSDP,8,4,7.9         <- while FSDP on 8 GPUs over 4 nodes shared its nodes

Rows of the same placement are averaged. A ratio cell (victim, aggressor) is the mean co-located
throughput divided by the victim's mean isolated throughput, so every victim with co-located
rows needs isolated rows too, and so does every aggressor (the fit simulates it beside the
victim). Counts are ASCII digits and throughputs ASCII numbers (``int`` and ``float`` would read
``1_6`` as 16). The result is a profile catalog like the shipped tables.

**Jobs that shared a fabric uplink** (an optional ``link`` column): on a cluster with fabric
levels two gangs on different nodes still fight over the uplink of a domain both cross. Such a
row names that uplink as the link model does (``spine0/leaf3/uplink``, see
``LinkState.link_names``)::

    model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s,link
    MoE,8,2,FSDP,8,2,12.5,spine0/leaf3/uplink   <- on other nodes, both across that leaf's uplink

An empty ``link`` means what a row without the column means: the jobs shared their nodes. A row
naming an uplink needs the cluster (``deepshare calibrate --samples CSV --cluster SPEC``) to say
how fast that uplink is next to its nodes' NICs (:func:`uplink_shares`); its jobs span at least
two nodes each. The fit (:mod:`.calibrate`) puts such a cell's jobs on their own NICs and PCIe and
on the one uplink, each across two domains of its level (the smallest split that crosses it; an
assumption, since a row does not say how the job was split).

**The cluster's hardware.** The link model's parameters are in the testbed's units (compute on a
TITAN Xp, NIC work at 40 Gb/s, PCIe work at 256 Gb/s; :mod:`.params`), and the simulator scales
them by each node's hardware (:mod:`.model`). With ``--cluster`` the fit does the same
(:func:`cluster_hardware`): it simulates every cell on the cluster's nodes, so the parameters
it finds come out in the testbed's units and, simulated on that cluster, give back the samples.
A row does not say which nodes its jobs ran on, so the cluster's nodes must all have the same
hardware (GPU speed, NIC, PCIe, NVLink), and NVLink domains spanning nodes (GB200 NVL72), where
a job's traffic depends on how its nodes fall into them, are refused. A row whose job, or whose
two jobs together, the cluster's nodes could not hold is refused by line (:func:`node_capacity`).
Without ``--cluster`` the samples are taken as measured on the testbed's hardware. Samples keep
keys on 8 nodes or more, which the fit leaves out of the testbed's profile tables.
"""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from deepshare.core.bounds import MAX_JOB_GPUS, MAX_THROUGHPUT, MIN_MEASURED_THROUGHPUT
from deepshare.core.contention.link.params import REF_NIC_GBPS, REF_PCIE_GBPS
from deepshare.core.errors import DeepShareError
from deepshare.core.files import TRACE_BYTES, numbered_rows, read_input_text
from deepshare.core.hardware import gpu_speed
from deepshare.core.names import has_control_character
from deepshare.core.topology import Topology
from deepshare.core.workloads import PROFILE_COUNT, Catalog, ProfileKey
from deepshare.core.written import NUMBER

COLUMNS = ("model", "gpus", "nodes", "co_model", "co_gpus", "co_nodes", "samples_per_s")
LINK_COLUMN = "link"
"""Optional: the fabric uplink the two jobs shared instead of their nodes (see the module doc)."""


@dataclass(frozen=True)
class UplinkPair:
    """A victim measured beside an aggressor on other nodes, both crossing one domain's uplink."""

    victim: ProfileKey
    aggressor: ProfileKey
    link: str
    """The uplink's name (``spine0/leaf3/uplink``)."""
    share: float
    """The uplink's bandwidth in NICs of its nodes (``uplink_gbps`` over their mean ``nic_gbps``):
    0.5 is a leaf whose uplink carries half of one node's NIC."""

    def sort_key(self) -> tuple[str, int, int, str, int, int, str]:
        """A fixed order of pairs (cells are laid out in it, so a fit does not depend on file order)."""
        v, a = self.victim, self.aggressor
        return (v.model, v.gpus, v.nodes, a.model, a.gpus, a.nodes, self.link)


@dataclass(frozen=True)
class ClusterHardware:
    """The hardware of the nodes samples were measured on, as the link model scales a job there
    (:func:`~deepshare.core.contention.link.model.node_works`): each factor turns a parameter in
    the testbed's units into the cluster's."""

    speed: float
    """GPU training speed relative to the TITAN Xp (compute takes ``compute_s / speed``)."""
    nic_scale: float
    """``REF_NIC_GBPS / nic_gbps``: the factor on NIC work."""
    pcie_scale: float
    """``REF_PCIE_GBPS / (intra_node_gbps * pcie_switches)``: the factor on PCIe work."""
    nvlink_scale: float = 0.0
    """0 on PCIe nodes (intra-node traffic crosses PCIe); on NVLink nodes ``REF_PCIE_GBPS /
    nvlink_gbps``, the factor on the intra-node work, which rides private NVLink (only the GPU
    <-> NIC copies cross PCIe)."""

    def is_reference(self) -> bool:
        """The testbed's hardware: every factor 1 on PCIe nodes (the fit is then bit for bit the
        fit without a cluster)."""
        return self == ClusterHardware(1.0, 1.0, 1.0)


def cluster_hardware(topology: Topology, label: str | None = None) -> ClusterHardware:
    """The one hardware of ``topology``'s nodes; :class:`DeepShareError` (starting with ``label``,
    by default the cluster's name) when its nodes differ in it (a samples row does not say which
    nodes its jobs ran on) or NVLink domains span nodes."""
    label = label or f"cluster {topology.name}"
    if topology.fabric.nvlink_level is not None:
        raise DeepShareError(f"{label}: its NVLink domains span nodes, and a samples row does not say "
                             f"how its jobs' nodes fell into them; calibrate from samples of a cluster whose NVLink "
                             f"stays inside each node")
    kinds: dict[ClusterHardware, str] = {}
    for node in topology.nodes:
        nvlink = node.fabric == "nvlink" and node.nvlink_gbps > 0
        kind = ClusterHardware(gpu_speed(node.gpu_model), REF_NIC_GBPS / node.nic_gbps,
                               REF_PCIE_GBPS / (node.intra_node_gbps * node.pcie_switches),
                               REF_PCIE_GBPS / node.nvlink_gbps if nvlink else 0.0)
        kinds.setdefault(kind, node.name)
    if len(kinds) > 1:
        first, second = list(kinds.values())[:2]
        raise DeepShareError(f"{label}: its nodes differ in hardware (GPU speed, NIC, PCIe or NVLink: "
                             f"{first} and {second}), and a samples row does not say which nodes its jobs ran on; "
                             f"calibrate from the samples of one kind of node with a cluster of those nodes")
    return next(iter(kinds))


@dataclass(frozen=True)
class Samples:
    """A samples file as calibration reads it: the profiles of jobs that shared nodes, and the
    ratios of those that shared an uplink."""

    catalog: Catalog
    uplinks: dict[UplinkPair, float]
    """Ratio (mean co-located over mean isolated throughput) per uplink pair."""
    hardware: ClusterHardware | None = None
    """The nodes' hardware (:func:`cluster_hardware`); None: the testbed's."""


def uplink_shares(topology: Topology) -> dict[str, float]:
    """Each fabric domain's uplink, by the link model's name (``spine0/leaf3/uplink``), as a number
    of its nodes' NICs (:attr:`UplinkPair.share`); non-blocking uplinks (0 Gbit/s) are left out:
    nothing is shared there."""
    shares = {}
    for domain in topology.fabric.domains:
        if domain.uplink_gbps > 0:
            nic = sum(topology.nodes[n].nic_gbps for n in domain.nodes) / len(domain.nodes)
            shares[f"{domain.name}/uplink"] = domain.uplink_gbps / nic
    return shares


def _key(row: dict[str, str], prefix: str, where: str, capacity: Sequence[int] | None = None) -> ProfileKey:
    """The row's job (``prefix`` ``co_``: its aggressor); with ``capacity`` (the cluster's GPUs per
    node, most first) one that no set of its nodes could hold is refused."""
    model = (row.get(f"{prefix}model") or "").strip()
    texts = [(row.get(f"{prefix}{field}") or "").strip() for field in ("gpus", "nodes")]
    if not all(PROFILE_COUNT.fullmatch(text) for text in texts):  # int() reads 1_6 as 16
        raise DeepShareError(
            f"{where}: fields '{prefix}gpus' and '{prefix}nodes': expected positive integers (at most 9 ASCII "
            f"digits), got {row.get(prefix + 'gpus')!r} and {row.get(prefix + 'nodes')!r}"
        )
    gpus, nodes = int(texts[0]), int(texts[1])
    if not model or has_control_character(model) or gpus <= 0 or nodes <= 0 or nodes > gpus or gpus > MAX_JOB_GPUS:
        raise DeepShareError(f"{where}: expected a model name without control characters and 1 <= {prefix}nodes <= "
                             f"{prefix}gpus <= {MAX_JOB_GPUS:,}")
    if capacity is not None and (nodes > len(capacity) or gpus > sum(capacity[:nodes])):
        most = sum(capacity[:min(nodes, len(capacity))])
        raise DeepShareError(f"{where}: fields '{prefix}gpus' and '{prefix}nodes': {gpus} GPUs on {nodes} nodes do not "
                             f"fit the cluster ({len(capacity)} nodes; its {min(nodes, len(capacity))} largest hold "
                             f"{most} GPUs)")
    return ProfileKey(model, gpus, nodes)


def _pair_fits(victim: ProfileKey, aggressor: ProfileKey, shared_nodes: bool, capacity: Sequence[int]) -> bool:
    """Whether the row's two jobs could run together on nodes of ``capacity`` (GPUs per node, most
    first; GPUs are not shared): side by side on ``n_v + n_a`` nodes (an uplink row), or on nodes
    of which they share at least one: from ``max(n_v, n_a)`` to ``n_v + n_a - 1`` nodes in all
    (the most the cluster has giving the most room), each job leaving a GPU of its nodes to the
    other. Necessary conditions, not a placement search."""
    if not shared_nodes:
        nodes = victim.nodes + aggressor.nodes
        return nodes <= len(capacity) and victim.gpus + aggressor.gpus <= sum(capacity[:nodes])
    nodes = min(victim.nodes + aggressor.nodes - 1, len(capacity))
    return (nodes >= max(victim.nodes, aggressor.nodes) and victim.gpus + aggressor.gpus <= sum(capacity[:nodes])
            and all(job.gpus < sum(capacity[:job.nodes]) for job in (victim, aggressor)))


def _sizes(capacity: Sequence[int]) -> str:
    """The nodes' GPU counts in words: ``8`` when all alike, else ``2 to 8``."""
    return str(capacity[0]) if capacity[0] == capacity[-1] else f"{capacity[-1]} to {capacity[0]}"


def node_capacity(topology: Topology) -> tuple[int, ...]:
    """``topology``'s GPUs per node, most first: what :func:`read_samples` checks a row's job
    against (``capacity``)."""
    return tuple(sorted((node.gpus for node in topology.nodes), reverse=True))


def parse_samples(text: str, source: str) -> Catalog:
    """The profiles of a samples CSV whose jobs shared nodes (a row naming an uplink is refused:
    that needs :func:`read_samples` with the cluster's uplinks)."""
    return read_samples(text, source).catalog


def read_samples(text: str, source: str, uplinks: Mapping[str, float] | None = None,
                 hardware: ClusterHardware | None = None, capacity: Sequence[int] | None = None) -> Samples:
    """The samples of ``text``; ``uplinks``: the cluster's :func:`uplink_shares`, which the
    ``link`` column's names must be among (None: no cluster given, so no row may name one);
    ``hardware``: its nodes' :func:`cluster_hardware` (None: the testbed's); ``capacity``: its
    :func:`node_capacity`, which every row's jobs must fit (None: not checked)."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DeepShareError(f"{source} line 1: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}")
    names = [name for name in reader.fieldnames or [] if name in (*COLUMNS, LINK_COLUMN)]
    if len(set(names)) != len(names):  # a dict row keeps the last of two: every value read from the wrong one
        again = next(name for i, name in enumerate(names) if name in names[:i])
        raise DeepShareError(f"{source} line 1: column {again!r} is given twice")
    has_link = LINK_COLUMN in (reader.fieldnames or [])
    alone: dict[ProfileKey, list[float]] = defaultdict(list)
    shared: dict[tuple[ProfileKey, ProfileKey], list[float]] = defaultdict(list)
    across: dict[UplinkPair, list[float]] = defaultdict(list)
    aggressor_lines: dict[ProfileKey, int] = {}  # each aggressor's first line
    victim_lines: dict[ProfileKey, int] = {}  # each co-located victim's first line
    for line, row in numbered_rows(reader, source):
        where = f"{source} line {line}"
        if None in row or any(row[c] is None for c in COLUMNS) or (has_link and row[LINK_COLUMN] is None):
            raise DeepShareError(f"{where}: expected {len(COLUMNS) + has_link} fields")
        if not NUMBER.fullmatch(row["samples_per_s"].strip()):  # float() also reads 2_0 as 20
            raise DeepShareError(f"{where}: field 'samples_per_s': expected a number, got {row['samples_per_s']!r}")
        value = float(row["samples_per_s"])
        if not MIN_MEASURED_THROUGHPUT <= value <= MAX_THROUGHPUT:  # a subnormal or a sum past a double broke the fit
            raise DeepShareError(f"{where}: field 'samples_per_s': expected a number from {MIN_MEASURED_THROUGHPUT:g} to "
                                 f"{MAX_THROUGHPUT:g}, got {value}")
        victim = _key(row, "", where, capacity)
        link = (row[LINK_COLUMN] or "").strip() if has_link else ""
        co_located = any((row[c] or "").strip() for c in ("co_model", "co_gpus", "co_nodes"))
        if co_located:
            victim_lines.setdefault(victim, line)
            aggressor = _key(row, "co_", where, capacity)
            aggressor_lines.setdefault(aggressor, line)
            if capacity is not None and not _pair_fits(victim, aggressor, not link, capacity):
                raise DeepShareError(f"{where}: the two jobs ({victim} and {aggressor}) cannot run together on the "
                                     f"cluster's nodes ({len(capacity)} nodes of {_sizes(capacity)} GPUs"
                                     f"{'; jobs that share nodes share at least one' if not link else ''})")
            if link:
                across[_uplink_pair(victim, aggressor, link, uplinks, where)].append(value)
            else:
                shared[(victim, aggressor)].append(value)
        elif link:
            raise DeepShareError(f"{where}: field 'link': expected empty on an isolated row (empty co_* fields), "
                                 f"got {link!r}")
        else:
            alone[victim].append(value)
    if not alone:
        raise DeepShareError(f"{source}: no isolated samples (rows with empty co_* fields)")
    isolated = {k: sum(v) / len(v) for k, v in alone.items()}
    jobs = [(line, "victim", key, "") for key, line in victim_lines.items()]
    jobs += [(line, "aggressor", key, " (co_* fields)") for key, line in aggressor_lines.items()]
    for line, role, key, fields in sorted(jobs, key=lambda job: job[0]):  # the fit simulates both jobs of a cell
        if key not in isolated:
            raise DeepShareError(f"{source} line {line}: the {role} {key}{fields} has no isolated samples (a row "
                                 "with its model, gpus and nodes and empty co_* fields)")
    ratios = {pair: _ratio(pair[0], values, isolated, source) for pair, values in shared.items()}
    crossing = {pair: _ratio(pair.victim, values, isolated, source) for pair, values in sorted(across.items(), key=lambda kv: kv[0].sort_key())}
    if not ratios and not crossing:
        raise DeepShareError(f"{source}: no co-located samples (rows with co_model, co_gpus, co_nodes)")
    return Samples(Catalog(isolated, ratios), crossing, hardware)


def _ratio(victim: ProfileKey, values: list[float], isolated: dict[ProfileKey, float], source: str) -> float:
    """The mean co-located throughput over the victim's isolated one, at most 1."""
    if victim not in isolated:
        raise DeepShareError(f"{source}: {victim} has co-located samples but no isolated ones")
    return min(1.0, sum(values) / len(values) / isolated[victim])


def _uplink_pair(victim: ProfileKey, aggressor: ProfileKey, link: str, uplinks: Mapping[str, float] | None,
                 where: str) -> UplinkPair:
    """The pair of a row naming ``link``; :class:`DeepShareError` naming the line and field when
    the cluster is unknown, lacks that uplink, or a job spans one node (it crosses no uplink)."""
    if uplinks is None:
        raise DeepShareError(f"{where}: field 'link': naming an uplink ({link!r}) needs the cluster whose fabric "
                             f"has it (deepshare calibrate --cluster SPEC)")
    if link not in uplinks:
        known = sorted(uplinks)
        listed = ", ".join(known[:8]) + (f" and {len(known) - 8} more" if len(known) > 8 else "")
        raise DeepShareError(f"{where}: field 'link': expected an uplink of the cluster's fabric "
                             f"({listed or 'it has none: every uplink is non-blocking'}), got {link!r}")
    for key, prefix in ((victim, ""), (aggressor, "co_")):
        if key.nodes < 2:
            raise DeepShareError(f"{where}: field '{prefix}nodes': a job crossing an uplink spans at least 2 nodes, "
                                 f"got {key.nodes}")
    return UplinkPair(victim, aggressor, link, uplinks[link])


def load_samples(path: str | os.PathLike[str], uplinks: Mapping[str, float] | None = None,
                 hardware: ClusterHardware | None = None, capacity: Sequence[int] | None = None) -> Samples:
    """The samples CSV at ``path`` (a regular file of at most :data:`~deepshare.core.files.TRACE_BYTES`:
    samples are recorded, like a trace); ``uplinks``, ``hardware`` and ``capacity`` as
    :func:`read_samples` takes them."""
    text = read_input_text(path, "samples file", TRACE_BYTES, label=f"--samples {path}", not_found="file not found")
    if not text.strip():
        raise DeepShareError(f"{path}: file is empty, expected samples")
    return read_samples(text, str(path), uplinks, hardware, capacity)
