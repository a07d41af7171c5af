"""A cluster's network fabric: ordered levels of domains, each domain's uplink.

Real GPU fabrics have several levels: NVLink domains that may span nodes (a GB200 NVL72 rack is
18 nodes x 4 GPUs on one NVLink switch fabric), leaf (ToR) switches, aggregation and spine or
core layers, each with an uplink that may be oversubscribed. A :class:`Fabric` is that, as data:

* :class:`Level` s, **lowest first** (``nvlink_domain`` < ``leaf`` < ``spine`` < ``core``). A
  level marked ``nvlink`` (only the lowest may be) is an NVLink domain: traffic between nodes of
  one such domain rides private NVLink, never a NIC or a switch uplink.
* Each node's domain at every level, by name. A domain is identified by its **path from the top**
  (``("spine0", "leaf3")``), because switch names repeat under different parents; so the domains
  form a tree whatever the names.
* Each domain's uplink to the level above, in Gbit/s: the level's ``uplink_gbps``, or the
  domain's nodes' NIC bandwidth over the level's ``oversubscription`` (2 means 2:1); 0 is
  non-blocking (no link to contend for). The top level's uplink matters only when several
  top-level domains exist (a job spanning two of them crosses both uplinks).
* Optionally the bandwidth of one uplink *port* (``port_gbps``): the uplink is that many parallel
  switch ports, and a flow is hashed onto one of them (ECMP), so two flows can collide on a port
  while others idle. Without it the uplink is one fat pipe (perfect load balancing).

A cluster spec without ``levels`` has one level, ``rack``, whose domains are the nodes' racks and
whose uplink is the spec's ``rack_uplink_gbps``: every earlier spec means what it meant.
Contention models read the fabric (:mod:`deepshare.core.contention.link`); placements read its
domains; nothing else hard-codes "rack".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

from deepshare.core.errors import DeepShareError

RACK_LEVEL = "rack"
"""The one level of a spec that names no levels (its domains are the nodes' racks)."""


@dataclass(frozen=True, slots=True)
class Level:
    """One level of the fabric (see the module doc)."""

    name: str
    nvlink: bool = False
    """Whether a domain of this level is an NVLink domain (only the lowest level may be)."""
    uplink_gbps: float = 0.0
    """Each domain's uplink, Gbit/s (0 with no ``oversubscription``: non-blocking)."""
    oversubscription: float = 0.0
    """When > 0: each domain's uplink is its nodes' NIC bandwidth over this (``uplink_gbps`` unused)."""
    port_gbps: float = 0.0
    """The bandwidth of one of the uplink's parallel switch ports, Gbit/s (400 for 400G ports): the
    uplink is then ``round(uplink / port_gbps)`` ports, and the link model hashes each flow that
    crosses it onto one port (ECMP). 0: the uplink is one fat pipe, perfectly balanced."""


@dataclass(frozen=True, slots=True)
class Domain:
    """One switch (or NVLink domain) of a level and the nodes below it."""

    index: int
    level: int
    """Index into :attr:`Fabric.levels` (0: the lowest)."""
    path: tuple[str, ...]
    """Names from the top level down to this domain: its identity."""
    nodes: tuple[int, ...]
    """Node indices below it, ascending."""
    uplink_gbps: float
    """Its uplink to the level above, Gbit/s (0: non-blocking)."""

    @property
    def name(self) -> str:
        """The path joined by ``/`` (``spine0/leaf3``): how logs, link loads and responses name it."""
        return "/".join(self.path)


@dataclass(frozen=True)
class Fabric:
    """The levels, the domains of each, and each node's domain at every level."""

    levels: tuple[Level, ...]
    domains: tuple[Domain, ...]
    node_domains: tuple[tuple[int, ...], ...]
    """Per node index: its domain's index at each level, lowest level first."""
    by_level: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    """Per level: its domains' indices."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_level", tuple(
            tuple(d.index for d in self.domains if d.level == level) for level in range(len(self.levels))))

    def level_index(self, name: str) -> int:
        """The index of the level called ``name``; :class:`DeepShareError` naming the levels there are."""
        for i, level in enumerate(self.levels):
            if level.name == name:
                return i
        raise DeepShareError(f"unknown fabric level {name!r}; this cluster's levels are "
                             f"{', '.join(level.name for level in self.levels)}")

    @property
    def nvlink_level(self) -> int | None:
        """The index of the NVLink-domain level (0), or None when the fabric has none."""
        return 0 if self.levels and self.levels[0].nvlink else None

    def domain_of(self, node: int, level: int) -> Domain:
        return self.domains[self.node_domains[node][level]]

    def spanned(self, nodes: Iterable[int], level: int) -> list[int]:
        """The domain indices at ``level`` that ``nodes`` lie in, ascending."""
        return sorted({self.node_domains[n][level] for n in nodes})


def build_fabric(levels: Sequence[Level], node_names: Sequence[Sequence[str]], nic_gbps: Sequence[float]) -> Fabric:
    """The fabric of ``levels`` (lowest first) where node ``i`` lies in the domains named
    ``node_names[i]`` (one name per level, lowest first) and has ``nic_gbps[i]`` of NIC bandwidth."""
    if not levels:
        raise DeepShareError("a fabric needs at least one level")
    names = [level.name for level in levels]
    if len(set(names)) != len(names):
        raise DeepShareError(f"levels: each level needs its own name, got {names}")
    for i, level in enumerate(levels):
        if level.nvlink and i != 0:
            raise DeepShareError(f"levels[{i}] ({level.name}): only the lowest level can be an NVLink domain")
    index: dict[tuple[int, tuple[str, ...]], int] = {}
    members: list[list[int]] = []
    keys: list[tuple[int, tuple[str, ...]]] = []
    node_domains = []
    for node, names_of_node in enumerate(node_names):
        if len(names_of_node) != len(levels):
            raise DeepShareError(f"node {node}: expected a domain at each of the {len(levels)} levels "
                                 f"({', '.join(names)}), got {len(names_of_node)}")
        row = []
        for level in range(len(levels)):
            path = tuple(reversed(names_of_node[level:]))  # top level first
            key = (level, path)
            found = index.get(key)
            if found is None:
                found = index[key] = len(keys)
                keys.append(key)
                members.append([])
            members[found].append(node)
            row.append(found)
        node_domains.append(tuple(row))
    domains = []
    for i, ((level, path), nodes) in enumerate(zip(keys, members)):
        spec = levels[level]
        uplink = (sum(nic_gbps[n] for n in nodes) / spec.oversubscription if spec.oversubscription > 0
                  else spec.uplink_gbps)
        if spec.port_gbps > 0:
            _check_ports(level, spec, "an uplink", float(uplink))
        domains.append(Domain(i, level, path, tuple(nodes), float(uplink)))
    for level, spec in enumerate(levels):
        if spec.port_gbps > 0 and nic_gbps:
            _check_ports(level, spec, "a node's NIC", max(nic_gbps))
    return Fabric(tuple(levels), tuple(domains), tuple(node_domains))


MAX_PORTS = 4096
"""Most switch ports (of ``port_gbps``) one uplink or one node's NICs may be split into: the link
model keeps a link per port, so an uplink of 10^9 Gbit/s over ports of 0.001 asked for 10^12 of
them (terabytes); real switches have tens to hundreds."""


def _check_ports(level: int, spec: Level, what: str, gbps: float) -> None:
    ports = round(gbps / spec.port_gbps)
    if ports > MAX_PORTS:
        raise DeepShareError(f"levels[{level}] ({spec.name}): {what} of {gbps:g} Gbit/s over ports of {spec.port_gbps:g} "
                             f"Gbit/s is {ports:,} ports; at most {MAX_PORTS:,} (give a larger port_gbps)")


class RequestProblem(NamedTuple):
    """One thing wrong with a topology request: the field to blame (where the service puts its
    422, and the field a form would highlight) and a message that names what was expected."""

    field: str
    message: str


_LEVEL_FIELDS = ("required_level", "preferred_level", "slice_level")


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Where a job must or should run, in Kueue's meaning (all optional; level names are the
    cluster's, checked against a fabric by :meth:`check`):

    * ``required_level``: all of the job's GPUs inside one domain of this level, or it waits;
    * ``preferred_level``: inside one domain of this level if any has room, else anywhere;
    * ``slice_size`` GPUs at a time inside one domain of ``slice_level`` (the job's GPUs a
      multiple of it): e.g. tensor-parallel groups of 8 kept inside one NVLink domain.

    A job is a gang whatever it asks: all of its GPUs start together or none do.

    The rules live once, in :meth:`problems_of`: the constructor, :meth:`check` (the simulator
    and the live scheduler) and the placement service (one 422 entry per problem) all use it.
    """

    required_level: str | None = None
    preferred_level: str | None = None
    slice_size: int | None = None
    slice_level: str | None = None

    def __post_init__(self) -> None:
        found = self.problems_of(self.required_level, self.preferred_level, self.slice_size, self.slice_level)
        if found:
            raise DeepShareError("; ".join(p.message for p in found))

    @staticmethod
    def problems_of(required_level: object = None, preferred_level: object = None, slice_size: object = None,
                    slice_level: object = None, *, fabric: Fabric | None = None,
                    gpus: int | None = None) -> list[RequestProblem]:
        """Everything wrong with a request of these fields (empty: none), before one is built, so
        a caller holding raw fields (an HTTP body) can name each bad one. Always: a required and a
        preferred level together, a slice size without its level (or the reverse), a slice size
        that is not a positive integer, a level that is not a non-empty name. With ``fabric``: a
        level it lacks, a slice level above the required one. With ``gpus``: GPUs that are not a
        multiple of the slice size."""
        found = _shape_problems(required_level, preferred_level, slice_size, slice_level)
        if gpus is not None and isinstance(slice_size, int) and not isinstance(slice_size, bool) \
                and slice_size > 0 and gpus % slice_size:
            found.append(RequestProblem("slice_size", f"the job's {gpus} GPUs must be a multiple of "
                                                      f"slice_size ({slice_size})"))
        if fabric is not None:
            found += _fabric_problems(required_level, preferred_level, slice_level, fabric)
        return found

    def problems(self, fabric: Fabric, gpus: int) -> list[RequestProblem]:
        """What keeps this request of a ``gpus``-GPU job from making sense on ``fabric`` (empty:
        nothing): :meth:`problems_of` with the fabric and the job's GPUs."""
        return self.problems_of(self.required_level, self.preferred_level, self.slice_size, self.slice_level,
                                fabric=fabric, gpus=gpus)

    @property
    def empty(self) -> bool:
        """Whether it asks nothing (``NO_TOPOLOGY`` or an equal request)."""
        return self is NO_TOPOLOGY or (self.required_level is None and self.preferred_level is None
                                       and self.slice_size is None)

    def check(self, fabric: Fabric, gpus: int, where: str) -> None:
        """:class:`DeepShareError` (prefixed ``where``) unless the levels exist in ``fabric``, the
        slice level is at or below the required one, and ``gpus`` is a multiple of ``slice_size``
        (:meth:`problems`, every problem named)."""
        found = self.problems(fabric, gpus)
        if found:
            raise DeepShareError(f"{where}: " + "; ".join(p.message for p in found))


def _shape_problems(required_level: object, preferred_level: object, slice_size: object,
                    slice_level: object) -> list[RequestProblem]:
    """The rules of :meth:`TopologyRequest.problems_of` that need no cluster."""
    found: list[RequestProblem] = []
    if required_level is not None and preferred_level is not None:
        found.append(RequestProblem("preferred_level", "give required_level or preferred_level, not both"))
    if (slice_size is None) != (slice_level is None):
        missing = "slice_level" if slice_level is None else "slice_size"
        found.append(RequestProblem(missing, "slice_size and slice_level go together: give both or neither"))
    if slice_size is not None and (isinstance(slice_size, bool) or not isinstance(slice_size, int) or slice_size <= 0):
        found.append(RequestProblem("slice_size", f"slice_size must be a positive integer, got {slice_size!r}"))
    for name, value in zip(_LEVEL_FIELDS, (required_level, preferred_level, slice_level)):
        if value is not None and (not isinstance(value, str) or not value):
            found.append(RequestProblem(name, f"{name} must be a level's name, got {value!r}"))
    return found


def _fabric_problems(required_level: object, preferred_level: object, slice_level: object,
                     fabric: Fabric) -> list[RequestProblem]:
    """The rules of :meth:`TopologyRequest.problems_of` that read the cluster's levels."""
    return level_problems(required_level, preferred_level, slice_level, [level.name for level in fabric.levels])


def level_problems(required_level: object, preferred_level: object, slice_level: object,
                   levels: Sequence[str], whose: str = "this cluster's") -> list[RequestProblem]:
    """What a request's levels break on a cluster of ``levels`` (names, lowest first; ``whose``
    levels they are, for the message): each named level exists, and a slice fits inside the
    required domain (checked when both levels exist)."""
    found: list[RequestProblem] = []
    known: dict[str, int] = {}
    for name, value in zip(_LEVEL_FIELDS, (required_level, preferred_level, slice_level)):
        if isinstance(value, str) and value:
            if value in levels:
                known[name] = list(levels).index(value)
            else:
                found.append(RequestProblem(name, f"{name}: unknown fabric level {value!r}; {whose} levels are "
                                                  f"{', '.join(levels)}"))
    if "slice_level" in known and "required_level" in known and known["slice_level"] > known["required_level"]:
        found.append(RequestProblem("slice_level", f"slice_level {slice_level!r} is above required_level "
                                    f"{required_level!r}; a slice must fit inside the required domain"))
    return found


NO_TOPOLOGY = TopologyRequest()
"""A job that asks nothing of the fabric."""


def request_violation(request: TopologyRequest, alloc: Iterable[tuple[int, int]], fabric: Fabric) -> str | None:
    """Why the placement ``alloc`` (``(node index, GPUs)`` pairs) breaks ``request``, or None when
    it holds: a required level spanned by more than one domain, or a slice domain holding GPUs
    that are not a whole number of slices. (A preferred level is a preference: never broken.)"""
    pairs = list(alloc)
    if request.required_level is not None:
        level = fabric.level_index(request.required_level)
        spanned = fabric.spanned((n for n, _ in pairs), level)
        if len(spanned) > 1:
            names = ", ".join(fabric.domains[d].name for d in spanned)
            return f"it requires one {request.required_level} domain and spans {len(spanned)} ({names})"
    if request.slice_size is not None and request.slice_level is not None:
        level = fabric.level_index(request.slice_level)
        held: dict[int, int] = {}
        for node, gpus in pairs:
            d = fabric.node_domains[node][level]
            held[d] = held.get(d, 0) + gpus
        for d, gpus in sorted(held.items()):
            if gpus % request.slice_size:
                return (f"its slices of {request.slice_size} GPUs must each lie inside one {request.slice_level} "
                        f"domain, and {fabric.domains[d].name} holds {gpus} of its GPUs")
    return None
