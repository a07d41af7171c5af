"""A cluster spec from a host-to-switch table or from Kubernetes nodes (``deepshare clusters import``).

Two inputs, told apart by their content (JSON or not):

* **A switch table** (CSV), as in Alibaba Lingjun's ``topo.csv``: a header row, then one row per
  host; the first column is the host's id, the others its switches from the **top** level down to
  the lowest (``ip,DSW,PSW,ASW``: core, aggregation, ToR). The levels are named after the header's
  columns, lowest first (``ASW`` < ``PSW`` < ``DSW``).
* **Kubernetes nodes** (``kubectl get nodes -o json``: a ``List`` of ``Node`` objects, or one
  ``Node``) with the levels given as ``(level name, label key)`` pairs, lowest first
  (``nvlink_domain=nvidia.com/gpu.clique``, ``leaf=topology.kubernetes.io/rack``, ...). A node's
  name is ``metadata.name``, its GPUs ``status.capacity["nvidia.com/gpu"]`` when present.

Host ids and node names become the nodes' names exactly (a node group's ``names``); a switch is
identified by its path from the top, so names that repeat under different parents are different
switches (:mod:`deepshare.core.fabric`). Nodes keep the input's order; consecutive hosts under the
same switches form one node group. Every bad input is one :class:`DeepShareError` line naming the
line, row or field. The spec is returned as YAML text, already checked by loading it back.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from deepshare.core.errors import DeepShareError, shown
from deepshare.core.names import CONTROL_RANGES, name_identity
from deepshare.core.topology_plain import MAX_GPUS_PER_NODE, MAX_NODES, NODE_TYPE_DEFAULTS, pcie_switches_problem
from deepshare.core.written import WRITTEN

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource a node's GPU count is read from (the NVIDIA device plugin's)."""

DEFAULT_NODE_TYPE: Mapping[str, Any] = MappingProxyType({
    "gpus": 8, "gpu_model": "H100-SXM5-80GB", "fabric": "nvlink", "pcie_switches": 8, "intra_node_gbps": 512,
    "nvlink_gbps": 3600, "nic_gbps": 3200,
})
"""The hardware of an imported node unless ``--node-type`` says otherwise: an 8 x H100 SXM node
as in the ``h100-leafspine-*`` presets (DGX H100: NVLink 4 at 450 GB/s per GPU per direction,
8 x 400 Gb/s NICs = 3200 Gb/s, the node's total NIC bandwidth; each ConnectX-7 behind its own
PCIe Gen5 x16 with its GPU, 8 x 512 Gb/s, so PCIe never caps the NICs)."""
DEFAULT_TYPE_NAME = "h100"

_NAME = re.compile(rf"^[^/{CONTROL_RANGES}]{{1,256}}\Z")
"""A node's, level's or switch's name: what the spec schema accepts (no ``/``, no control characters)."""

_FIELD_KINDS: Mapping[str, type] = {
    "name": str, "gpus": int, "gpu_model": str, "fabric": str, "pcie_switches": int,
    "intra_node_gbps": float, "nvlink_gbps": float, "nic_gbps": float,
}
"""``--node-type FIELD=VALUE``: the fields (``name``: the node type's name in the spec)."""


@dataclass(frozen=True, slots=True)
class Host:
    """One imported node."""

    name: str
    domains: tuple[str, ...]
    """Its switch (domain) at each level, lowest level first."""
    gpus: int | None
    """Its GPUs when the input says (Kubernetes capacity), else None: the node type's."""


@dataclass(frozen=True, slots=True)
class HostTable:
    """The hosts of an input and its levels."""

    kind: str
    """``switch table`` or ``kubectl nodes``."""
    levels: tuple[str, ...]
    """The levels' names, lowest first."""
    hosts: tuple[Host, ...]


def _check_name(value: str, where: str, what: str) -> str:
    if not value:
        raise DeepShareError(f"{where}: empty {what}")
    if not _NAME.match(value):
        raise DeepShareError(f"{where}: {what} {shown(value)} must be 1-256 characters without '/' or control characters")
    return value


def _check_host(value: str, where: str, what: str) -> str:
    """A node's name: :func:`_check_name`'s, and no ``;`` (it separates a job's nodes in
    ``simulate --jobs-csv``'s placement column, where ``a;b`` would read as two nodes)."""
    _check_name(value, where, what)
    if ";" in value:
        raise DeepShareError(f"{where}: {what} {shown(value)}: no ';' in node names (it separates the nodes of a job's "
                             "placement in --jobs-csv)")
    return value


def is_json(text: str) -> bool:
    """Whether ``text`` is JSON (Kubernetes nodes) rather than a CSV table: it starts with ``{`` or ``[``."""
    return text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def parse_hosts(text: str, source: str, levels: Sequence[tuple[str, str]] = ()) -> HostTable:
    """The hosts of ``text``: Kubernetes node JSON (needs ``levels``: (name, label key) pairs,
    lowest first) or a switch table (whose header names its levels; ``levels`` must be empty)."""
    if is_json(text):
        return parse_kubectl_nodes(text, source, levels)
    if levels:
        raise DeepShareError(f"{source}: --level is for Kubernetes node JSON; a switch table names its levels "
                             "in its header (host id, then switches from the top level down)")
    return parse_switch_table(text, source)


def parse_switch_table(text: str, source: str) -> HostTable:
    """A Lingjun-style switch table (see the module doc)."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            raise DeepShareError(f"{source}: empty; expected a header (host id, then switches from the top level "
                                 "down, e.g. ip,DSW,PSW,ASW) and a row per host")
        header_line = reader.line_num
        columns = [c.strip() for c in header]
        if len(columns) < 2:
            raise DeepShareError(f"{source} line {header_line}: expected a host column and at least one switch column "
                                 f"(e.g. ip,DSW,PSW,ASW), got {','.join(columns)!r}")
        for i, column in enumerate(columns):
            _check_name(column, f"{source} line {header_line}, column {i + 1}", "column name")
        seen_columns: dict[str, int] = {}
        for i, column in enumerate(columns[1:], start=2):
            if column in seen_columns:
                raise DeepShareError(f"{source} line {header_line}: column {column!r} is both column {seen_columns[column]} "
                                     f"and column {i}; each level needs its own name")
            seen_columns[column] = i
        top_down = columns[1:]
        hosts: list[Host] = []
        first_line: dict[str, int] = {}
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) != len(columns):
                raise DeepShareError(f"{source} line {line}: expected {len(columns)} fields ({', '.join(columns)}), "
                                     f"got {len(row)}")
            fields = [f.strip() for f in row]
            for column, value in zip(columns, fields):
                check = _check_host if column == columns[0] else _check_name
                check(value, f"{source} line {line}, column {column}", "host id" if column == columns[0] else "switch name")
            host = fields[0]
            same = name_identity(host)  # h1 and h<ZWSP>1, or NFC and NFD spellings, show alike
            if same in first_line:
                raise DeepShareError(f"{source} line {line}: host {host!r} is also on line {first_line[same]} (or one "
                                     "that shows alike); each host once")
            first_line[same] = line
            if len(hosts) >= MAX_NODES:
                raise DeepShareError(f"{source} line {line}: more than {MAX_NODES} hosts")
            hosts.append(Host(host, tuple(reversed(fields[1:])), None))
    except csv.Error as exc:
        raise DeepShareError(f"{source} line {reader.line_num}: not a valid CSV row ({exc})") from None
    if not hosts:
        raise DeepShareError(f"{source}: no hosts after the header (line {header_line})")
    return HostTable("switch table", tuple(reversed(top_down)), tuple(hosts))


def parse_kubectl_nodes(text: str, source: str, levels: Sequence[tuple[str, str]]) -> HostTable:
    """``kubectl get nodes -o json`` (see the module doc)."""
    from deepshare.core.documents import load_json

    if not levels:
        raise DeepShareError(f"{source}: Kubernetes node JSON needs the levels: --level NAME=LABEL_KEY, lowest "
                             "first (e.g. --level leaf=topology.kubernetes.io/rack)")
    check_unique_levels([level for level, _ in levels])
    doc = load_json(text.lstrip("\ufeff"), source, "Kubernetes nodes (kubectl get nodes -o json)")
    if isinstance(doc, dict) and doc.get("kind") == "Node":
        items, prefix = [doc], ""
    elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
        items, prefix = doc["items"], "items"
    else:
        raise DeepShareError(f"{source}: expected Kubernetes nodes (a List with items, from kubectl get nodes -o json, "
                             "or one Node)")
    if not items:
        raise DeepShareError(f"{source}: items: no nodes")
    if len(items) > MAX_NODES:
        raise DeepShareError(f"{source}: items: {len(items)} nodes; expected at most {MAX_NODES}")
    hosts: list[Host] = []
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        where = f"{source}: {prefix}[{i}]" if prefix else f"{source}:"
        if not isinstance(item, dict):
            raise DeepShareError(f"{where}: expected a Node object, got {type(item).__name__}")
        meta = item.get("metadata")
        if not isinstance(meta, dict):
            raise DeepShareError(f"{where}: metadata: missing (expected a Node object)")
        name = meta.get("name")
        if name is None:
            raise DeepShareError(f"{where}: metadata.name: missing (expected the node's name)")
        if not isinstance(name, str):
            raise DeepShareError(f"{where}: metadata.name: expected a string, got {type(name).__name__}")
        _check_host(name, f"{where}: metadata.name", "node name")
        where = f"{where} (node {name!r})"
        same = name_identity(name)
        if same in first:
            raise DeepShareError(f"{where}: also {prefix}[{first[same]}] (or a name that shows alike); each node once")
        first[same] = i
        labels = meta.get("labels", {})
        if not isinstance(labels, dict):
            raise DeepShareError(f"{where}: metadata.labels: expected a mapping, got {type(labels).__name__}")
        domains = []
        for level, key in levels:
            value = labels.get(key)
            if value is None:
                raise DeepShareError(f"{where}: metadata.labels: no label {key!r} (--level {level}={key})")
            if not isinstance(value, str):
                raise DeepShareError(f"{where}: metadata.labels[{key!r}]: expected a string, got {type(value).__name__}")
            domains.append(_check_name(value.strip(), f"{where}: metadata.labels[{key!r}]", "value"))
        hosts.append(Host(name, tuple(domains), _capacity_gpus(item, where)))
    return HostTable("kubectl nodes", tuple(level for level, _ in levels), tuple(hosts))


def _capacity_gpus(item: Mapping[str, Any], where: str) -> int | None:
    status = item.get("status")
    capacity = status.get("capacity") if isinstance(status, dict) else None
    if not isinstance(capacity, dict) or GPU_RESOURCE not in capacity:
        return None
    raw = capacity[GPU_RESOURCE]
    field = f"{where}: status.capacity[{GPU_RESOURCE!r}]"
    if isinstance(raw, str) and not re.fullmatch(r"[0-9]{1,7}", raw):  # int() reads "٨" and "1_0" too
        gpus = None
    else:
        gpus = int(raw) if isinstance(raw, (int, str)) and not isinstance(raw, bool) else None
    if gpus is None or not 0 < gpus <= MAX_GPUS_PER_NODE:
        raise DeepShareError(f"{field}: expected a GPU count from 1 to {MAX_GPUS_PER_NODE}, got {shown(raw)}")
    return gpus


def level_pairs(values: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``NAME=TEXT`` flag values as (name, text) pairs, the names checked as level names."""
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        name, rest = name.strip(), rest.strip()
        if not sep or not name or not rest:
            raise DeepShareError(f"{flag} {value!r}: expected LEVEL=VALUE")
        _check_name(name, f"{flag} {value!r}", "level name")
        pairs.append((name, rest))
    return pairs


def level_numbers(values: Sequence[str], flag: str, levels: Sequence[str], low: float, high: float,
                  low_text: str) -> dict[str, float]:
    """``LEVEL=NUMBER`` flag values for ``levels``: each level at most once, the number in ``[low, high]``."""
    out: dict[str, float] = {}
    for name, text in level_pairs(values, flag):
        if name not in levels:
            raise DeepShareError(f"{flag} {name}={text}: unknown level {name!r}; the levels are {', '.join(levels)}")
        if name in out:
            raise DeepShareError(f"{flag}: level {name!r} given twice")
        try:
            number = float(text) if WRITTEN[float].fullmatch(text) else float("nan")
        except ValueError:
            number = float("nan")
        if not low <= number <= high:
            raise DeepShareError(f"{flag} {name}={text}: expected {low_text}, got {text!r}")
        out[name] = number
    return out


def check_unique_levels(names: Sequence[str]) -> None:
    """``--level``: each level's name at most once."""
    for i, level in enumerate(names):
        if level in names[:i]:
            raise DeepShareError(f"--level: level {level!r} given twice; each level needs its own name")


def check_level_options(levels: Sequence[str], oversubscription: Mapping[str, float], uplink_gbps: Mapping[str, float],
                        nvlink: str | None) -> None:
    """``--oversubscription`` / ``--uplink-gbps`` (as :func:`level_numbers` parsed them) name known
    levels, never both for one level, and ``--nvlink`` names the lowest level."""
    for level in (*oversubscription, *uplink_gbps):
        if level not in levels:
            raise DeepShareError(f"level {level!r}: unknown; the levels are {', '.join(levels)}")
    both = sorted(set(oversubscription) & set(uplink_gbps))
    if both:
        raise DeepShareError(f"level {both[0]!r}: give --oversubscription or --uplink-gbps, not both")
    if nvlink is not None and (not levels or nvlink != levels[0]):
        where = "unknown level" if nvlink not in levels else "only the lowest level can be one"
        raise DeepShareError(f"--nvlink {nvlink}: {where}; the levels, lowest first, are {', '.join(levels)}")


def node_type(options: Sequence[str], gpus_per_node: int | None = None) -> tuple[str, dict[str, Any]]:
    """The imported nodes' type: (name, hardware fields), :data:`DEFAULT_NODE_TYPE` with
    ``--node-type FIELD=VALUE`` options and ``--gpus-per-node`` applied, checked by the schema."""
    from pydantic import ValidationError

    from deepshare.core.topology_spec import NodeTypeSpec
    from deepshare.core.yamlspec import format_validation_error

    name = DEFAULT_TYPE_NAME
    fields: dict[str, Any] = dict(DEFAULT_NODE_TYPE)
    given: set[str] = set()
    for option in options:
        key, sep, text = option.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or key not in _FIELD_KINDS:
            raise DeepShareError(f"--node-type {option!r}: expected FIELD=VALUE with FIELD one of {', '.join(_FIELD_KINDS)}")
        if key in given:
            raise DeepShareError(f"--node-type: {key} given twice")
        given.add(key)
        kind = _FIELD_KINDS[key]
        try:  # ASCII digits only: int() and float() also read 1_0 as 10 and other scripts' digits
            if kind is not str and not WRITTEN[kind].fullmatch(text):
                raise ValueError(text)
            value: Any = kind(text) if kind is not str else text
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise DeepShareError(f"--node-type {option!r}: expected {expected}, got {text!r}") from None
        if kind is str and not text:
            raise DeepShareError(f"--node-type {option!r}: empty {key}")
        if key == "name":
            name = _check_name(value, f"--node-type {option!r}", "node type name")
        else:
            fields[key] = value
    if "name" not in given and "gpu_model" in given:  # "h100" would name B200 nodes
        name = _model_slug(fields["gpu_model"]) or name
    if gpus_per_node is not None:
        if "gpus" in given and fields["gpus"] != gpus_per_node:
            raise DeepShareError(f"--gpus-per-node {gpus_per_node} and --node-type gpus={fields['gpus']}: give one")
        fields["gpus"] = gpus_per_node
    if fields["gpus"] > 0:  # else the schema says what gpus must be
        if "pcie_switches" not in given:  # the default type's switches, one per GPU at most
            fields["pcie_switches"] = min(fields["pcie_switches"], fields["gpus"])
        problem = pcie_switches_problem(fields["gpus"], fields["pcie_switches"])
        if problem and fields["pcie_switches"] > 0:
            raise DeepShareError(f"--node-type: {problem}")
    try:
        spec = NodeTypeSpec(**fields)
    except ValidationError as exc:
        raise DeepShareError(f"--node-type: {format_validation_error(exc)}") from None
    return name, {key: getattr(spec, key) for key in ("gpus", *NODE_TYPE_DEFAULTS)}


def _model_slug(model: str) -> str:
    """A node type's name from its GPU model (``B200`` -> ``b200``; ``A100 80GB`` -> ``a100-80gb``)."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:64]


@dataclass(frozen=True)
class ImportOptions:
    """How to turn hosts into a spec (the flags of ``deepshare clusters import``)."""

    name: str
    type_name: str = DEFAULT_TYPE_NAME
    hardware: Mapping[str, Any] | None = None
    """The node type's fields (``gpus`` the default GPUs per node); None: :data:`DEFAULT_NODE_TYPE`."""
    oversubscription: Mapping[str, float] | None = None
    uplink_gbps: Mapping[str, float] | None = None
    nvlink: str | None = None
    """The lowest level's name when its domains are NVLink domains."""


def spec_yaml(table: HostTable, options: ImportOptions, source: str) -> str:
    """The cluster spec YAML of ``table`` (see the module doc)."""
    hardware = dict(options.hardware or DEFAULT_NODE_TYPE)
    over = dict(options.oversubscription or {})
    uplink = dict(options.uplink_gbps or {})
    check_level_options(table.levels, over, uplink, options.nvlink)
    _check_name(options.name, "--name", "cluster name")

    default_gpus = hardware["gpus"]
    types: dict[int, str] = {}  # the GPU counts the hosts have, each a node type (only those used)
    for host in table.hosts:
        gpus = host.gpus if host.gpus is not None else default_gpus
        if gpus not in types:
            types[gpus] = options.type_name if gpus == default_gpus else f"{options.type_name}-{gpus}gpu"
    groups: list[tuple[str, tuple[str, ...], list[str]]] = []
    for host in table.hosts:
        type_name = types[host.gpus if host.gpus is not None else default_gpus]
        if groups and groups[-1][0] == type_name and groups[-1][1] == host.domains:
            groups[-1][2].append(host.name)
        else:
            groups.append((type_name, host.domains, [host.name]))

    lines = [
        f"# Imported by `deepshare clusters import` from {_comment(source)} ({table.kind}):",
        f"# {len(table.hosts)} nodes; levels, lowest first: {', '.join(_comment(lv) for lv in table.levels)}.",
        "# Node hardware is --node-type's (default: 8 x H100 SXM, nic_gbps = the node's total NIC bandwidth).",
        f"name: {_q(options.name)}",
        "node_types:",
    ]
    for gpus, type_name in types.items():
        # one PCIe switch per GPU at most: a 4-GPU node of an 8-switch type has 4
        fields = {**hardware, "gpus": gpus, "pcie_switches": min(hardware["pcie_switches"], gpus)}
        body = ", ".join(f"{key}: {_value(fields[key])}" for key in ("gpus", *NODE_TYPE_DEFAULTS))
        lines.append(f"  {_q(type_name)}: {{{body}}}")
    lines.append("levels:")
    for i, level in enumerate(table.levels):
        parts = [f"name: {_q(level)}"]
        if i == 0 and options.nvlink is not None:
            parts.append("nvlink: true")
        if level in over:
            parts.append(f"oversubscription: {_value(over[level])}")
        if level in uplink:
            parts.append(f"uplink_gbps: {_value(uplink[level])}")
        lines.append(f"  - {{{', '.join(parts)}}}")
    lines.append("nodes:")
    for type_name, domains, names in groups:
        where = ", ".join(f"{_q(level)}: {_q(d)}" for level, d in zip(table.levels, domains))
        lines.append(f"  - {{type: {_q(type_name)}, count: {len(names)}, domains: {{{where}}},")
        lines.append(f"     names: [{', '.join(_q(n) for n in names)}]}}")
    return "\n".join(lines) + "\n"


_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*\Z")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
"""Plain YAML 1.1 scalars that a loader reads as something other than a string."""


def _q(text: str) -> str:
    """A YAML scalar that is ``text`` whatever it looks like (``1e3``, ``yes``, ``10.0``): plain
    when it is a simple word, else double-quoted (JSON's quoting is valid YAML)."""
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return '"' + "".join(_escaped(c) for c in text) + '"'


def _escaped(c: str) -> str:
    """``c`` inside a double-quoted YAML scalar: printable ASCII as itself, anything else as a
    ``\\u``/``\\U`` escape, so no character the loader would read as another (NEL and the other
    YAML 1.1 line breaks, which it folds to a space) is written raw."""
    if c in '"\\':
        return "\\" + c
    if " " <= c <= "~":
        return c
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


def _value(v: Any) -> str:
    if isinstance(v, str):
        return _q(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _comment(text: str) -> str:
    """``text`` safe inside a ``#`` comment line: every character that is not printable is
    replaced: those YAML reads as line breaks (ASCII controls, NEL, LINE and PARAGRAPH SEPARATOR),
    which ended the comment and added spec keys; those PyYAML refuses (C1 controls, U+FFFE); and
    the surrogates a file name that is not UTF-8 arrives with, which cannot be written out."""
    return "".join(c if c.isprintable() else "?" for c in text)


@dataclass(frozen=True)
class Imported:
    """What :func:`import_cluster` made."""

    yaml: str
    topology: Any
    """The spec's :class:`~deepshare.core.topology.Topology`."""
    table: HostTable


def import_cluster(text: str, source: str, *, name: str, node_type_options: Sequence[str] = (),
                   gpus_per_node: int | None = None, oversubscription: Sequence[str] = (),
                   uplink_gbps: Sequence[str] = (), levels: Sequence[str] = (), nvlink: str | None = None) -> Imported:
    """The spec of the input ``text`` (named ``source``) under the flags of ``deepshare clusters
    import`` (``LEVEL=VALUE`` strings as given). The YAML is loaded back
    (:func:`~deepshare.core.topology.parse_topology`) and its node names compared with the
    input's, so what is written is a spec that loads as imported."""
    from deepshare.core.files import CONFIG_BYTES
    from deepshare.core.topology import parse_topology

    type_name, hardware = node_type(node_type_options, gpus_per_node)
    table = parse_hosts(text, source, level_pairs(levels, "--level"))
    options = ImportOptions(
        name=name, type_name=type_name, hardware=hardware,
        oversubscription=level_numbers(oversubscription, "--oversubscription", table.levels, 1, 1e6,
                                       "a ratio from 1 to 1,000,000 (2 means 2:1)"),
        uplink_gbps=level_numbers(uplink_gbps, "--uplink-gbps", table.levels, 0, 1e9,
                                  "Gbit/s from 0 (non-blocking) to 1,000,000,000"),
        nvlink=nvlink,
    )
    yaml_text = spec_yaml(table, options, source)
    size = len(yaml_text.encode("utf-8"))
    if size > CONFIG_BYTES:
        raise DeepShareError(f"{source}: the spec would be {size:,} bytes, over the {CONFIG_BYTES:,} a cluster spec may have")
    topology = parse_topology(yaml_text, source=f"the spec imported from {source}")
    if [n.name for n in topology.nodes] != [h.name for h in table.hosts]:  # a name no spec can hold as it is
        changed = next(h.name for n, h in zip(topology.nodes, table.hosts) if n.name != h.name)
        raise DeepShareError(f"host {changed!r}: cannot be written as a node name that reads back the same")
    return Imported(yaml_text, topology, table)
