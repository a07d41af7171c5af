"""Per-model parameters of the link model, and the catalog that ships them.

Six models (the measured ones) have parameters fitted by ``deepshare calibrate`` to the measured
isolated throughputs and pairwise ratios; they ship in ``deepshare/data/link_params.json`` with
the pairwise interactions (``kappa``) and a sensitivity per measured placement (``"gpus,nodes"``;
placements that were not measured react like their model's typical one, sensitivity 1).
Common models that traces name (ResNet-50, VGG-16/19, Inception-v3, BERT-base/large, GPT-2,
Llama-7B, ...) get parameters from their published sizes (:data:`COMMON_MODELS`):

* gradient bytes = parameters x bytes per value, exchanged by ring all-reduce; the NIC work
  for the reference 2-node ring volume factor is ``bytes * 8 / (40 Gb/s * efficiency)`` and the
  PCIe work per intra-node ring unit ``bytes * 8 / (256 Gb/s * efficiency)``, with the NCCL
  socket efficiency :data:`LINE_RATE_EFFICIENCY`;
* compute seconds per iteration = per-GPU batch / per-GPU samples/s on a TITAN Xp-class GPU;
* overlap, latency, PCIe coupling, congestion and the placement-shape exponents: the median of
  the fitted models.

LLM-era classes (Llama 3 8B/70B, Mixtral 8x7B, GPT-3 175B, ViT-H/14) get parameters derived from
their size, batch, precision and parallelism by :mod:`deepshare.core.contention.link.llm`.

Any other name falls back to the workload catalog's proxy model (see ``workloads.py``).
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from importlib import resources
from pathlib import Path

from deepshare.core.documents import load_json, unique_keys
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.contention.link import llm
from deepshare.core.contention.link.file_shape import number, section, table
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.core.workloads import Catalog, default_catalog, remember

log = logging.getLogger(__name__)

REF_NIC_GBPS = 40.0
"""NIC bandwidth the fitted NIC works are expressed at (the testbed's InfiniBand)."""
REF_PCIE_GBPS = 256.0
"""Intra-node bandwidth the fitted PCIe works are expressed at (2 PCIe Gen3 x16 switches)."""
LINE_RATE_EFFICIENCY = 0.7
SIGNED = ("nodes_exponent", "gpus_per_node_exponent")
MAX_PARAMETER: dict[str, float] = {
    "compute_s": 1e4, "nic_s": 1e4, "pcie_s": 1e4, "latency_s": 1e4, "all_to_all_s": 1e4,
    "samples_per_gpu": 1e9, "pcie_coupling": 100.0, "congestion": 1000.0,
}
"""Largest value of each unsigned parameter (fitted ones are at most 6.6 s, 82,791 samples, 1.15
and 1.58): far beyond any real model, yet small enough that the physics' products stay finite
(values near the float limit overflowed to NaN ratios and a simulation that never ended)."""
MIN_POSITIVE = 1e-9
"""Smallest ``compute_s`` and ``samples_per_gpu`` (both must be positive)."""
"""The parameters that may be negative (exponents of the placement shape)."""
MAX_EXPONENT = 4.0


@dataclass(frozen=True)
class LinkParams:
    """What the link model needs to know about one model (seconds are per training iteration)."""

    compute_s: float
    """GPU compute time per iteration."""
    nic_s: float
    """NIC busy time per iteration at 40 Gb/s for ring volume factor 1 (scaled by 2(k-1)/k)."""
    pcie_s: float
    """PCIe busy time per intra-node ring unit (2(g-1) units for g GPUs on a node) at 256 Gb/s."""
    overlap: float
    """Fraction of the shorter of compute and communication hidden behind the longer (0..1)."""
    samples_per_gpu: float
    """Samples per GPU per iteration (sets the absolute throughput)."""
    latency_s: float = 0.0
    """Per-iteration synchronisation cost per extra node (not bandwidth: never contended)."""
    pcie_coupling: float = 0.0
    """Fraction of the NIC work that also crosses the node's PCIe fabric (GPU <-> NIC copies)."""
    congestion: float = 0.0
    """Extra loss beyond a fair share when sharing (>= 0)."""
    nodes_exponent: float = 0.0
    """Inter-node volume scales as ``(nodes / 2) ** nodes_exponent`` beyond the ring formula."""
    gpus_per_node_exponent: float = 0.0
    """Inter-node volume scales as ``gpus_per_node ** gpus_per_node_exponent`` (1 GPU per node: 1)."""
    all_to_all_s: float = 0.0
    """The part of ``nic_s`` that is all-to-all traffic (MoE expert parallelism across nodes), in the
    same units. The NIC work is ``nic_s`` whatever the pattern; on a fabric uplink the ring part
    (``nic_s - all_to_all_s``) crosses each spanned domain's boundary once (one node's volume), the
    all-to-all part with the share of the domain's nodes' traffic that leaves the domain (see
    :mod:`deepshare.core.contention.link.model`). 0, the default: all ring (every fitted model)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value == value and abs(value) != float("inf")):
                raise DeepShareError(f"link parameter {f.name}: expected a finite number, got {value!r}")
            if f.name in SIGNED:
                if abs(value) > MAX_EXPONENT:
                    raise DeepShareError(f"link parameter {f.name}: expected a number in [-{MAX_EXPONENT}, {MAX_EXPONENT}], got {value}")
            elif value < 0:
                raise DeepShareError(f"link parameter {f.name}: expected a finite number >= 0, got {value!r}")
            elif value > MAX_PARAMETER.get(f.name, float("inf")):
                raise DeepShareError(f"link parameter {f.name}: expected at most {MAX_PARAMETER[f.name]:g}, got {value!r}")
        if self.overlap > 1:
            raise DeepShareError(f"link parameter overlap: expected a number in [0, 1], got {self.overlap}")
        if self.compute_s < MIN_POSITIVE or self.samples_per_gpu < MIN_POSITIVE:
            raise DeepShareError(f"link parameters compute_s and samples_per_gpu must be at least {MIN_POSITIVE:g}, "
                                 f"got {self.compute_s!r} and {self.samples_per_gpu!r}")
        if self.all_to_all_s > self.nic_s:
            raise DeepShareError(f"link parameter all_to_all_s: expected at most nic_s ({self.nic_s}), "
                                 f"got {self.all_to_all_s} (it is the all-to-all part of nic_s)")


def shape_factor(p: "LinkParams", nodes: float, gpus_per_node: float) -> float:
    """Inter-node volume relative to the ring formula for a placement of this shape.

    ``(nodes / 2) ** nodes_exponent * gpus_per_node ** gpus_per_node_exponent``: 1 for the
    reference shape (2 nodes, 1 GPU each). The ring formula alone says a model moves the same
    bytes per node whatever its placement; NCCL does not (ring or tree by size and node count,
    one channel per GPU or hierarchical reduction inside a node), and the measured isolated
    throughputs and ratios show it. Two exponents per model are fitted; a power law extends to
    placements the table lacks (3, 8 or 16 nodes, 8 GPUs per node) without steps.
    """
    return (nodes / 2.0) ** p.nodes_exponent * gpus_per_node ** p.gpus_per_node_exponent


MAX_KAPPA = 1000.0
"""Largest pair interaction a parameter file may give (fitted ones are 0.06 to 3.2), and largest
placement sensitivity and sensitivity scale."""


@dataclass(frozen=True)
class CommonModel:
    params_m: float
    """Parameters, millions."""
    bytes_per_value: float
    batch_per_gpu: float
    samples_per_s_per_gpu: float
    traffic_factor: float = 1.0
    """Wire volume relative to a ring all-reduce of the gradients (1.5 for FSDP's two
    all-gathers and reduce-scatter: ``3 (k - 1) / k`` parameter bytes per node against the
    all-reduce's ``2 (k - 1) / k``; the model applies the ring factor itself)."""


COMMON_MODELS: dict[str, CommonModel] = {
    "resnet50": CommonModel(25.6, 4, 32, 180),
    "resnet101": CommonModel(44.5, 4, 32, 110),
    "vgg16": CommonModel(138.4, 4, 32, 120),
    "vgg19": CommonModel(143.7, 4, 32, 100),
    "inceptionv3": CommonModel(23.8, 4, 32, 130),
    "bertbase": CommonModel(110.0, 4, 32, 100),
    "bertlarge": CommonModel(340.0, 4, 8, 30),
    "gpt2": CommonModel(124.0, 4, 4, 10),
    "gpt2medium": CommonModel(355.0, 4, 2, 3),
    "llama7b": CommonModel(6738.0, 2, 1, 0.1, traffic_factor=1.5),
}


def normalise(name: str) -> str:
    """``ResNet-50`` -> ``resnet50``: lower case without separators."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def placement_key(gpus: int, nodes: int) -> str:
    """``"8,4"``: how the sensitivity table names a placement (GPUs, nodes)."""
    return f"{gpus},{nodes}"


@dataclass(frozen=True)
class LinkCatalog:
    """Parameters by model name, the pairwise interaction matrix ``kappa``, the per-placement
    ``sensitivity`` (model -> ``"gpus,nodes"`` -> factor, 1 where absent) and a per-model
    ``scale`` of every placement's sensitivity (1 where absent: how ``--perturb-contention``
    makes a world that differs from the shipped parameters)."""

    params: dict[str, LinkParams]
    kappa: dict[str, dict[str, float]]
    source: str = ""
    sensitivity: dict[str, dict[str, float]] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_norm", {normalise(m): m for m in self.params})
        object.__setattr__(self, "_resolved", {})  # model name -> its entry by name, or None: ask the workload catalog

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.params)

    def resolve(self, model: str, catalog: Catalog | None = None) -> str:
        """The catalog entry standing for ``model``: itself, a common model, or the proxy the
        workload ``catalog`` (the default one when None) gives it.

        Only the by-name match is remembered here (it does not depend on ``catalog``); a
        proxy is asked of ``catalog`` every time (it remembers its own answers), so two
        workload catalogs that proxy a model differently each get theirs, even through the one
        process-wide :func:`default_link_catalog`."""
        resolved = self._resolved  # type: ignore[attr-defined]
        if model in resolved:
            hit = resolved[model]
        else:  # bounded: the names are a request's to choose
            hit = self._by_norm.get(normalise(model))  # type: ignore[attr-defined]
            remember(resolved, model, hit)
        if hit is None:  # not ours by name: the workload catalog's proxy
            hit = (catalog or default_catalog()).resolve(model)
            if hit not in self.params:
                raise DeepShareError(f"link catalog has no parameters for {model!r} nor its proxy {hit!r}")
        return hit

    def interaction(self, victim: str, aggressor: str) -> float:
        return self.kappa.get(victim, {}).get(aggressor, 1.0)

    def placement_sensitivity(self, model: str, gpus: int, nodes: int) -> float:
        """How strongly a job of ``model`` on ``gpus`` GPUs over ``nodes`` nodes reacts to sharing.

        Fitted per measured placement (a job on 4 GPUs of 2 nodes does not suffer like one on 4
        GPUs of 4 nodes, beyond what its traffic explains: NCCL picks channels and algorithms by
        shape); 1 for placements that were not measured.
        """
        value = self.sensitivity.get(model, {}).get(placement_key(gpus, nodes), 1.0)
        return value * self.scale[model] if model in self.scale else value

    def to_json(self, extra: dict | None = None) -> str:
        doc = {
            "source": self.source,
            "reference": {"nic_gbps": REF_NIC_GBPS, "pcie_gbps": REF_PCIE_GBPS},
            "models": {m: _params_doc(p) for m, p in self.params.items()},
            "kappa": self.kappa,
            "sensitivity": self.sensitivity,
        }
        if self.scale:
            doc["scale"] = self.scale
        doc.update(extra or {})
        return json.dumps(doc, indent=2) + "\n"

    @staticmethod
    def from_json(text: str, source: str = "<link params>") -> "LinkCatalog":
        doc = load_json(text, source, "a link-parameter file", object_pairs_hook=unique_keys)
        if not isinstance(doc, dict):
            raise DeepShareError(f"{source}: expected a link-parameter file's object (models, kappa, sensitivity), "
                                 f"got {shown(doc)}")
        params = {}
        for name, values in section(doc, "models", source, "model names to parameters", required=True).items():
            where = f"{source}: models.{str(name)[:64]}"
            if not isinstance(values, dict):
                raise DeepShareError(f"{where}: expected a mapping of link parameters, got {shown(values)}")
            try:
                params[name] = LinkParams(**values)
            except DeepShareError as exc:
                raise DeepShareError(f"{where}: {exc}") from None
            except TypeError as exc:  # a key LinkParams lacks, or one missing
                raise DeepShareError(f"{where}: {exc}") from None
        kappa = table(doc, "kappa", source, "aggressor models to factors")
        sensitivity = table(doc, "sensitivity", source, "'gpus,nodes' placements to factors")
        scale = {m: number(x, f"{source}: scale.{str(m)[:64]}")
                 for m, x in section(doc, "scale", source, "models to factors").items()}
        for model, row in sensitivity.items():  # fitted ones are 0.54 to 1.85
            for key, value in row.items():
                if not 0 < value <= MAX_KAPPA:
                    raise DeepShareError(f"{source}: sensitivity.{str(model)[:64]}.{str(key)[:64]}: expected a number "
                                         f"in (0, {MAX_KAPPA:g}], got {value}")
        for model, value in scale.items():
            if not 0 < value <= MAX_KAPPA:
                raise DeepShareError(f"{source}: scale.{str(model)[:64]}: expected a number in (0, {MAX_KAPPA:g}], got {value}")
        for victim, row in kappa.items():
            for aggressor, value in row.items():
                if not 0 < value <= MAX_KAPPA:  # NaN or inf made the simulator's event times NaN: it never ended
                    raise DeepShareError(f"{source}: kappa.{str(victim)[:64]}.{str(aggressor)[:64]}: expected a number "
                                         f"in (0, {MAX_KAPPA:g}] (1 is neutral), got {value}")
        return LinkCatalog(params, kappa, doc.get("source", source), sensitivity, scale)


def _params_doc(p: LinkParams) -> dict[str, float]:
    """``p`` as a parameter file writes it: ``all_to_all_s`` only when not 0 (all ring), so the
    files of ring-only models read as before the field existed."""
    doc = asdict(p)
    if not doc["all_to_all_s"]:
        del doc["all_to_all_s"]
    return doc


def with_common_models(fitted: LinkCatalog) -> LinkCatalog:
    """``fitted`` plus :data:`COMMON_MODELS` estimated from their published sizes and the LLM-era
    classes (:data:`llm.LLM_CLASSES`) derived from their size and parallelism."""
    shared = {
        name: statistics.median(getattr(p, name) for p in fitted.params.values())
        for name in ("overlap", "latency_s", "pcie_coupling", "congestion", *SIGNED)
    }
    params = dict(fitted.params)
    for name, m in COMMON_MODELS.items():
        wire_bits = m.params_m * 1e6 * m.bytes_per_value * m.traffic_factor * 8
        params.setdefault(
            name,
            LinkParams(
                compute_s=m.batch_per_gpu / m.samples_per_s_per_gpu,
                nic_s=wire_bits / (REF_NIC_GBPS * 1e9 * LINE_RATE_EFFICIENCY),
                pcie_s=wire_bits / (REF_PCIE_GBPS * 1e9 * LINE_RATE_EFFICIENCY),
                samples_per_gpu=m.batch_per_gpu,
                **shared,
            ),
        )
    for name, c in llm.LLM_CLASSES.items():
        params.setdefault(name, LinkParams(**llm.derive(
            c, REF_NIC_GBPS, REF_PCIE_GBPS, LINE_RATE_EFFICIENCY, congestion=shared["congestion"])))
    return LinkCatalog(params, fitted.kappa, fitted.source, fitted.sensitivity)


def load_link_catalog(path: str | Path | None = None) -> LinkCatalog:
    """A parameter file written by ``deepshare calibrate --out`` over the shipped catalog.

    Models and interactions in the file replace the shipped ones; models it lacks keep the
    shipped parameters, so a file fitted on a few models still serves any trace.
    """
    if path is None:
        return default_link_catalog()
    text = read_input_text(path, "link parameters file", CONFIG_BYTES,
                           not_found="cannot read link parameters: file not found")
    loaded = LinkCatalog.from_json(text, str(path))
    base = default_link_catalog()
    kappa = {v: dict(row) for v, row in base.kappa.items()}
    for victim, row in loaded.kappa.items():
        kappa.setdefault(victim, {}).update(row)
    sensitivity = {m: dict(row) for m, row in base.sensitivity.items()}
    for model in loaded.params:  # a refitted model's placements replace the shipped ones
        sensitivity.pop(model, None)
    for model, row in loaded.sensitivity.items():
        sensitivity.setdefault(model, {}).update(row)
    return LinkCatalog({**base.params, **loaded.params}, kappa, loaded.source, sensitivity, dict(loaded.scale))


@lru_cache(maxsize=1)
def default_link_catalog() -> LinkCatalog:
    text = (resources.files("deepshare.data") / "link_params.json").read_text(encoding="utf-8")
    return with_common_models(LinkCatalog.from_json(text, "deepshare/data/link_params.json"))
