"""GPU models and their training speed relative to the testbed's TITAN Xp.

The link contention model's per-model compute times were fitted on (or estimated for) the
2019 testbed's NVIDIA TITAN Xp, while its communication times scale with each node's NIC and
uplink bandwidth. A node's ``gpu_model`` is free text (``H100-SXM5-80GB``, ``B200 (GB200
NVL72)``); :func:`gpu_speed` resolves it to a row of :data:`GPU_MODELS` and returns how many
times faster than a TITAN Xp that GPU trains, so compute shrinks as the hardware grows, and
communication becomes relatively dearer on fast GPUs, as it does on real clusters.

**How the speed is derived.** ``speed = peak_tflops * achieved / (TITAN Xp's peak * achieved)``:

* ``peak_tflops``: the vendor's dense (no 2:4 sparsity) peak at the precision the GPU trains in
  (FP32 on CUDA cores for the TITAN Xp, whose FP16 runs at 1/64 rate; FP16 tensor cores for
  V100 / T4 / RTX 3090; BF16 tensor cores from Ampere on). Sources are on each row.
* ``achieved``: the fraction of that peak a training job sustains (model FLOPs utilisation).
  Published for the large-model generation: Megatron-LM (Shoeybi et al. 2019) sustained 30% of
  peak on V100; Narayanan et al. (SC'21) 138 TFLOPS per A100 for GPT-3 175B (44%); the Llama 3
  paper (Meta 2024) 38-43% BF16 MFU on 16K H100s. Everything else is marked as an assumption on
  its row (Blackwell: as H100; inference-class cards: as V100; TITAN Xp FP32: 45%, which is
  about what ~200 ResNet-50 images/s at ~24.6 GFLOP per training image come to).

The figure is for transformer-class training, where tensor cores pay off; convolutional nets
and embedding-heavy models gain less on new GPUs (an H100 trains ResNet-50 about an order of
magnitude faster than a TITAN Xp, not 70 times). One speed per GPU model is a simplification,
documented in ``docs/workloads.md``.

Unknown names (the default label ``unknown``, custom hardware) get 1.0, today's behaviour, and
are logged once per name. The lookup is a pure function of the name, cached: it runs whenever
the link model rates a job.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuModel:
    """One GPU model's training compute (see the module doc for the formula)."""

    key: str
    """Canonical name (``h100-sxm``)."""
    pattern: str
    """Regular expression matched against the normalised ``gpu_model`` label (:func:`normalise_label`)."""
    peak_tflops: float
    """Dense peak TFLOPS at the training precision (vendor datasheet)."""
    achieved: float
    """Fraction of the peak a training job sustains (MFU)."""
    source: str
    """Where ``peak_tflops`` and ``achieved`` come from; "assumption" where nothing is published."""

    @property
    def achieved_tflops(self) -> float:
        return self.peak_tflops * self.achieved


REFERENCE_KEY = "titan-xp"

# Order matters: the first pattern that matches wins (gb200 before b200, a100 before a10,
# H100 PCIe before H100). Patterns start at a word boundary and refuse a following digit, so
# ``a10`` does not match ``a100`` nor ``l4`` match ``l40s``.
GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("titan-xp", r"\btitan ?xp\b", 12.15, 0.45,
             "NVIDIA TITAN Xp: 3840 CUDA cores x 1582 MHz boost x 2 = 12.15 FP32 TFLOPS; "
             "achieved 45%: assumption (~200 ResNet-50 images/s in FP32 x ~24.6 GFLOP/image)"),
    GpuModel("gb200", r"\bgb200(?!\d)", 2500.0, 0.40,
             "NVIDIA GB200 NVL72 datasheet: 5 PFLOPS BF16 sparse = 2.5 dense per GPU; achieved: assumption (as H100)"),
    GpuModel("b200", r"\bb200(?!\d)", 2250.0, 0.40,
             "NVIDIA HGX B200 datasheet: 4.5 PFLOPS BF16 sparse = 2.25 dense per GPU; achieved: assumption (as H100)"),
    GpuModel("h200", r"\bh200(?!\d)", 989.0, 0.40,
             "NVIDIA H200 datasheet: 989 BF16 dense TFLOPS (the H100's compute; its larger, faster "
             "memory is not modelled); achieved: as H100"),
    GpuModel("h100-pcie", r"\bh100(?!\d).*\bpcie", 756.0, 0.40,
             "NVIDIA H100 PCIe datasheet: 1513 BF16 sparse = 756 dense; achieved: Llama 3 paper, 38-43% MFU"),
    GpuModel("h100-sxm", r"\bh100(?!\d)", 989.0, 0.40,
             "NVIDIA H100 SXM datasheet: 1979 BF16 sparse = 989 dense; achieved: Llama 3 paper, 38-43% BF16 MFU on H100"),
    GpuModel("h800", r"\bh800(?!\d)", 989.0, 0.40,
             "H800: the H100 SXM's compute with reduced NVLink (the figure as H100 SXM); achieved: as H100"),
    GpuModel("a100", r"\ba100(?!\d)", 312.0, 0.44,
             "NVIDIA A100 datasheet: 312 BF16 dense TFLOPS (40 and 80 GB); achieved: Narayanan et al. SC'21, "
             "138 TFLOPS/GPU for GPT-3 175B = 44%"),
    GpuModel("a800", r"\ba800(?!\d)", 312.0, 0.44,
             "A800: the A100's compute with reduced NVLink (the figure as A100); achieved: as A100"),
    GpuModel("l40s", r"\bl40s\b", 362.0, 0.30,
             "NVIDIA L40S datasheet: 733 BF16 sparse = 362 dense; achieved: assumption (as V100)"),
    GpuModel("a10g", r"\ba10g\b", 70.0, 0.30,
             "AWS G5's A10G: about 70 FP16/BF16 dense tensor TFLOPS (no NVIDIA datasheet; third-party "
             "comparisons of A10 and A10G); achieved: assumption (as V100)"),
    GpuModel("a10", r"\ba10(?!\d)", 125.0, 0.30,
             "NVIDIA A10 datasheet: 250 BF16 sparse = 125 dense; achieved: assumption (as V100)"),
    GpuModel("l4", r"\bl4(?!\d)", 121.0, 0.30,
             "NVIDIA L4 datasheet: 242 BF16 sparse = 121 dense; achieved: assumption (as V100)"),
    GpuModel("v100-pcie", r"\bv100(?!\d).*\bpcie", 112.0, 0.30,
             "NVIDIA V100 PCIe datasheet: 112 FP16 tensor TFLOPS; achieved: Megatron-LM (2019), 30% of peak"),
    GpuModel("v100", r"\bv100(?!\d)", 125.0, 0.30,
             "NVIDIA V100 SXM2 datasheet: 125 FP16 tensor TFLOPS; achieved: Megatron-LM (2019), 30% of peak"),
    GpuModel("t4", r"\bt4(?!\d)", 65.0, 0.30,
             "NVIDIA T4 datasheet: 65 FP16 tensor TFLOPS; achieved: assumption (as V100)"),
    GpuModel("rtx3090", r"\brtx ?3090\b", 35.6, 0.30,
             "NVIDIA GA102 whitepaper: RTX 3090, 35.6 FP16 tensor TFLOPS with FP32 accumulate (dense); "
             "achieved: assumption (as V100)"),
)
"""The table, in matching order. ``docs/workloads.md`` shows it with the speeds."""

_BY_KEY = {g.key: g for g in GPU_MODELS}
REFERENCE = _BY_KEY[REFERENCE_KEY]
_COMPILED = tuple((g, re.compile(g.pattern)) for g in GPU_MODELS)
_NOISE = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")


def normalise_label(label: str) -> str:
    """``"NVIDIA H100-SXM5-80GB"`` -> ``"h100 sxm5 80gb"``: lower case, vendor words dropped,
    every run of other characters one space."""
    words = re.sub(r"[^a-z0-9]+", " ", label.lower())
    return " ".join(_NOISE.sub(" ", words).split())


@lru_cache(maxsize=1024)
def gpu_model_of(label: str) -> GpuModel | None:
    """The table's row for a node's ``gpu_model`` label, or None when no row matches (logged once)."""
    text = normalise_label(label)
    for model, pattern in _COMPILED:
        if pattern.search(text):
            return model
    if text in ("", "unknown"):
        log.debug("gpu_model %r: no GPU model given; computing at the TITAN Xp reference speed", label)
    else:
        log.warning("gpu_model %r is not in the hardware table (deepshare/core/hardware.py); "
                    "computing at the TITAN Xp reference speed", label)
    return None


@lru_cache(maxsize=1024)
def gpu_speed(label: str) -> float:
    """Training speed of the GPU named ``label`` relative to a TITAN Xp (1.0 when unknown)."""
    model = gpu_model_of(label)
    if model is None or model.key == REFERENCE_KEY:
        return 1.0
    return model.achieved_tflops / REFERENCE.achieved_tflops


def slowest_speed(labels: tuple[str, ...]) -> float:
    """The speed of the slowest GPU among ``labels``: a synchronous job waits for it."""
    return min(gpu_speed(label) for label in labels) if labels else 1.0
