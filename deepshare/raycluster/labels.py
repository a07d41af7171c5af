"""The ``deepshare.io/*`` node labels and ``deepshare_fabric_*`` resources of cluster YAMLs.

Every GPU worker type of a cluster YAML describes its hardware to the scheduler with Ray node
labels (strings, Kubernetes label syntax) and one custom resource::

    resources: {GPU: 8, deepshare_fabric_nvlink: 1}
    labels:
      deepshare.io/gpu-model: A100-SXM4-40GB      # required
      deepshare.io/fabric: nvlink                 # required: pcie | nvlink
      deepshare.io/nic: efa                       # required: ethernet | efa | infiniband | roce | gpudirect-tcpx
      deepshare.io/nic-gbps: "400"                # required: NIC bandwidth per node, Gbit/s
      deepshare.io/price-usd-per-hour: "32.773"   # required: on-demand price of one node
      deepshare.io/pcie-switches: "4"             # optional, default 1
      deepshare.io/intra-node-gbps: "256"         # optional, default 128 (PCIe uplink per switch)
      deepshare.io/nvlink-gbps: "2400"            # optional, default 0 (per GPU, nvlink fabric)
      deepshare.io/provisioning-s: "420"          # optional, default 300 (request to Ray joined)

The resource ``deepshare_fabric_<fabric>: 1`` lets Ray tasks ask for a fabric; the labels give
the full node type (the same fields as a cluster spec's node type, plus price and NIC kind).
"""

from __future__ import annotations

import math
import re

from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deepshare.core.autoscaling.spec import MAX_PRICE_USD_PER_HOUR, MAX_SECONDS, NodePoolSpec
from deepshare.core.bounds import MAX_LINK_GBPS, MIN_LINK_GBPS
from deepshare.core.topology_plain import MAX_PCIE_SWITCHES
from deepshare.core.errors import DeepShareError
from deepshare.core.yamlspec import format_validation_error
from deepshare.infra.raycompat import node_label_syntax_check

PREFIX = "deepshare.io/"
ROLE_LABEL = PREFIX + "role"
FABRIC_RESOURCE = "deepshare_fabric_"
NIC_KINDS = ("ethernet", "efa", "infiniband", "roce", "gpudirect-tcpx")


class FabricLabels(BaseModel):
    """The parsed ``deepshare.io/*`` labels of one GPU node type."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu_model: str = Field(min_length=1)
    fabric: Literal["pcie", "nvlink"]
    nic: Literal["ethernet", "efa", "infiniband", "roce", "gpudirect-tcpx"]
    nic_gbps: float = Field(ge=MIN_LINK_GBPS, le=MAX_LINK_GBPS)
    price_usd_per_hour: float = Field(ge=0, le=MAX_PRICE_USD_PER_HOUR, allow_inf_nan=False)
    pcie_switches: int = Field(default=1, gt=0, le=MAX_PCIE_SWITCHES)
    intra_node_gbps: float = Field(default=128.0, ge=MIN_LINK_GBPS, le=MAX_LINK_GBPS)
    nvlink_gbps: float = Field(default=0.0, ge=0, le=MAX_LINK_GBPS)
    provisioning_s: float = Field(default=300.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)

    def pool(self, gpus: int, min_nodes: int, max_nodes: int, rack: str) -> NodePoolSpec:
        """This node type as an autoscaling pool of the simulator."""
        fields = self.model_dump(exclude={"nic"})
        return NodePoolSpec(gpus=gpus, min_nodes=min_nodes, max_nodes=max_nodes, rack=rack, **fields)


RACK_LABEL = PREFIX + "rack"
"""The rack a node is in (the live scheduler's default ``rack`` level, ``runtime/cluster.py``)."""
DEFAULT_RACK = "rack0"
"""The rack of a node type whose labels name none (the live scheduler's default, too)."""


def rack_of(labels: Mapping[str, object], where: str) -> str:
    """``deepshare.io/rack`` of ``labels`` (:data:`DEFAULT_RACK` without one or when empty, as
    the live scheduler reads it); a value that is no text is one error naming the label."""
    value = labels.get(RACK_LABEL) or DEFAULT_RACK
    if not isinstance(value, str):
        raise DeepShareError(f"{where}: {RACK_LABEL}: expected a rack name, got {value!r}")
    return value


def parse_labels(labels: Mapping[str, object], where: str) -> FabricLabels:
    """The ``deepshare.io/*`` entries of ``labels`` as :class:`FabricLabels`; errors name ``where``.
    Only the hyphenated names (``deepshare.io/nic-gbps``) are labels: the live scheduler reads
    those, so ``deepshare.io/nic_gbps`` is refused rather than validated as a value it never sees."""
    raw: dict[str, object] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not key.startswith(PREFIX) or key in (ROLE_LABEL, RACK_LABEL):
            continue  # the role and the rack say where a node is, not what it is (:func:`rack_of`)
        name = key[len(PREFIX):]
        if "_" in name:  # the live scheduler (runtime/cluster.py) reads the hyphenated names only
            raise DeepShareError(f"{where}: {key[:100]}: unknown DeepShare label (the names are hyphenated: "
                                 f"{PREFIX}{name.replace('_', '-')[:64]})")
        raw[name.replace("-", "_")] = value
    if not raw:
        raise DeepShareError(
            f"{where}: a GPU node type needs deepshare.io/* labels (gpu-model, fabric, nic, nic-gbps, "
            "price-usd-per-hour) describing its hardware"
        )
    try:
        return FabricLabels.model_validate(raw)
    except ValidationError as exc:
        text = format_validation_error(exc)
        for name in FabricLabels.model_fields:  # name the label as written, not the field
            text = text.replace(f"{name}:", f"{PREFIX}{name.replace('_', '-')}:")
        text = text.replace("Extra inputs are not permitted", "unknown DeepShare label")
        raise DeepShareError(f"{where}: {text}") from None


def check_label_syntax(labels: Mapping[str, object], where: str) -> None:
    """Ray's own label syntax rules (Kubernetes keys and values): :func:`~deepshare.infra.raycompat.node_label_syntax_check`."""
    bad = [k for k, v in labels.items() if not isinstance(v, str)]
    if bad:
        raise DeepShareError(f"{where}: label {bad[0]!r} must be a string (quote numbers in YAML)")
    validate_node_label_syntax = node_label_syntax_check()
    try:
        validate_node_label_syntax({str(k): str(v) for k, v in labels.items()})
    except ValueError as exc:
        raise DeepShareError(f"{where}: {str(exc).strip()}") from None


def check_fabric_resource(resources: Mapping[str, object], fabric: str, where: str) -> None:
    """Every resource a finite number >= 0 (what ``ray start --resources`` takes), and exactly one
    ``deepshare_fabric_*`` resource, the labelled fabric's, with value 1."""
    for key, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < math.inf:
            raise DeepShareError(f"{where}: {str(key)[:64]}: expected a resource amount (a finite number >= 0), "
                                 f"got {str(amount)[:40]}")
    fabric_keys = sorted(k for k in resources if str(k).startswith(FABRIC_RESOURCE))
    want = FABRIC_RESOURCE + fabric
    if fabric_keys != [want] or resources[want] != 1:  # (a bool amount, true == 1, was refused above)
        raise DeepShareError(
            f"{where}: expected the custom resource {want}: 1 (matching deepshare.io/fabric={fabric}), "
            f"got {', '.join(f'{k}: {resources[k]}' for k in fabric_keys) or 'none'}"
        )


RAY_OWN_RESOURCES = {"CPU": "--num-cpus", "GPU": "--num-gpus", "memory": "--memory",
                     "object_store_memory": "--object-store-memory"}
"""Resources ``ray start`` sets from its own options (and refuses in ``--resources``: Ray's
``DEFAULT_RESOURCES``), with the option that sets each."""
RESOURCE_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")
"""A custom resource's name in a ``--resources`` shell word: nothing the shell reads (``$``, quotes, backquotes)."""


def check_start_resources(resources: Mapping[str, object], where: str) -> None:
    """The custom resources of ``ray start --resources``: no resource Ray sets itself (``GPU``
    there makes ``ray start`` fail; ``--num-gpus`` says it), and names of letters, digits and
    ``_ . : / -`` only (KubeRay pastes the value into a bash line inside its quotes, where a name
    holding ``$(...)`` would run)."""
    for key in resources:
        if key in RAY_OWN_RESOURCES:
            raise DeepShareError(f"{where}: {key}: one of Ray's own resources, which ray start refuses in --resources "
                                 f"(give it with {RAY_OWN_RESOURCES[key]})")
        if not isinstance(key, str) or not RESOURCE_NAME.fullmatch(key):
            raise DeepShareError(f"{where}: resource name {str(key)[:64]!r}: expected 1-128 letters, digits, "
                                 "'_', '.', ':', '/' or '-'")


def parse_label_string(text: str, where: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (``ray start --labels``) as a mapping."""
    labels: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise DeepShareError(f"{where}: expected labels as key=value,key=value, got {part!r}")
        if key.strip() in labels:  # Ray would keep one of them: the spec must mean one thing
            raise DeepShareError(f"{where}: label {key.strip()!r} is given twice (give each label once)")
        labels[key.strip()] = value.strip()
    return labels
