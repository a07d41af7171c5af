"""Model mixes: which catalog model each job of a trace without model names gets.

Public traces (Helios, Philly) and generated ones say nothing about the model a job trains, yet
contention depends on it, so models are drawn from a :class:`ModelMix`. Presets weight the
catalog's communication classes (``heavy``/``medium``/``low``, see
:meth:`deepshare.core.workloads.Catalog._derive_comm_classes`):

============ ======= ======== =====
preset        heavy   medium   low
============ ======= ======== =====
``random``   uniform over the catalog's models
``heavy``      70%     20%     10%
``medium``     20%     60%     20%
``low``        10%     20%     70%
============ ======= ======== =====

A class's weight is split evenly over its models; when the catalog has no model of a class,
that class's weight goes to the other classes in proportion to their weights.

``llm`` names models instead of classes: the LLM-era classes whose link parameters are derived
from their size and parallelism (``deepshare.core.contention.link.llm``), weighted 4 : 2 : 2 : 1
: 1 (``llama3-8b``, ``llama3-70b``, ``mixtral-8x7b``, ``gpt3-175b``, ``vit-h14``). The weights are
an assumption shaped by published descriptions of LLM clusters, none of which gives a per-model
job share: Acme (Hu et al., NSDI'24) and Lingjun/Crux (SIGCOMM'24) clusters run mostly dense LLM
pretraining and fine-tuning of 7B-70B models, with a few very large jobs; MoE training is a
growing minority; vision models a minority. Pair it with ``--demand gang-heavy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from deepshare.core.errors import DeepShareError, shown
from deepshare.core.workloads import Catalog, default_catalog
from deepshare.core.written import NUMBER

COMM_CLASSES = ("heavy", "medium", "low")

LINE_BREAKING = "\x00\r\n"
"""What a trace's name (job id, model, user, level) may not hold: a canonical CSV keeps a job to a
line, so a quoted line break reads back as a name no other tool shows on one line, and NUL
ends the text for C readers. The canonical writer refuses them, its reader too, and ``--mix``."""

MAX_FLAG_NAME_CHARS = 256
"""The longest name a trace flag gives (a custom mix's model, ``trace generate``'s levels): they
name catalog models, short proxies or a cluster's levels, and a 100,000-character name is a
pasted mistake, not a model."""


def on_one_line(text: str) -> bool:
    """Whether ``text`` reads back unchanged from a canonical CSV: non-empty, no surrounding
    whitespace (the loaders strip it), nothing of :data:`LINE_BREAKING` and no lone surrogate (what
    a byte that is not UTF-8 in a command line becomes: no file can be written with it)."""
    return (bool(text.strip()) and text == text.strip() and not any(c in text for c in LINE_BREAKING)
            and not any("\ud800" <= c <= "\udfff" for c in text))


@dataclass(frozen=True)
class NamedModels:
    """A preset that weights models by name (relative weights), not communication classes."""

    weights: Mapping[str, float]


LLM_MIX = NamedModels({"llama3-8b": 4.0, "llama3-70b": 2.0, "mixtral-8x7b": 2.0, "gpt3-175b": 1.0, "vit-h14": 1.0})
"""The ``llm`` preset (weights: an assumption, see the module doc)."""

MIX_PRESETS: Mapping[str, Mapping[str, float] | NamedModels | None] = {
    "random": None,  # uniform over models, not over classes
    "heavy": {"heavy": 0.7, "medium": 0.2, "low": 0.1},
    "medium": {"heavy": 0.2, "medium": 0.6, "low": 0.2},
    "low": {"heavy": 0.1, "medium": 0.2, "low": 0.7},
    "llm": LLM_MIX,
}
"""Preset name -> weight of each communication class (None: uniform over models; NamedModels:
weights of named models)."""


@dataclass(frozen=True)
class ModelMix:
    """Relative weights of models, ``((model, weight), ...)``; weights need not sum to 1."""

    weights: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        pairs = tuple((str(m), float(w)) for m, w in self.weights)
        if not pairs:
            raise DeepShareError("model mix: expected at least one model")
        seen: set[str] = set()
        for model, weight in pairs:
            if not model.strip():
                raise DeepShareError("model mix: expected non-empty model names")
            if model in seen:
                raise DeepShareError(f"model mix: model {model!r} is given twice")
            seen.add(model)
            if not (math.isfinite(weight) and weight > 0):
                raise DeepShareError(f"model mix: weight of {model!r} must be a positive number, got {weight}")
        if not math.isfinite(sum(w for _, w in pairs)):  # 1e308 twice: no probabilities to draw with
            raise DeepShareError("model mix: weights must add up to a finite number (they are relative: try 1, 2, ...)")
        object.__setattr__(self, "weights", pairs)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.weights)

    @property
    def probabilities(self) -> dict[str, float]:
        """Each model's share of the total weight."""
        total = math.fsum(w for _, w in self.weights)
        return {m: w / total for m, w in self.weights}


def mix_preset(name: str, catalog: Catalog | None = None) -> ModelMix:
    """The preset mix ``name`` (see the module doc) over ``catalog``'s models."""
    catalog = catalog or default_catalog()
    if name not in MIX_PRESETS:
        raise DeepShareError(f"unknown model mix {name!r}; presets are: {', '.join(MIX_PRESETS)}")
    class_weights = MIX_PRESETS[name]
    if isinstance(class_weights, NamedModels):
        return ModelMix(tuple(class_weights.weights.items()))
    if class_weights is None:
        return ModelMix(tuple((m, 1.0) for m in catalog.models))
    members = {c: [m for m in catalog.models if catalog.comm_class.get(m) == c] for c in class_weights}
    present = {c: w for c, w in class_weights.items() if members[c]}
    if not present:
        raise DeepShareError(f"model mix {name!r}: the catalog has no model of any class")
    scale = math.fsum(class_weights.values()) / math.fsum(present.values())
    weights = []
    for model in catalog.models:
        cls = catalog.comm_class.get(model)
        if cls in present:
            weights.append((model, present[cls] * scale / len(members[cls])))
    return ModelMix(tuple(weights))


def parse_mix(text: str) -> ModelMix:
    """A custom mix from ``"MoE:2,DLRM:1"`` (model:weight pairs; weights are relative). A model
    name must be one a canonical trace can hold (:func:`on_one_line`), at most
    :data:`MAX_FLAG_NAME_CHARS` characters, and a weight plain ASCII number text
    (:data:`deepshare.core.written.NUMBER`; ``float`` alone reads ``1_0`` as 10): else the name
    would be refused only when a generated trace is written, naming a job rather than the mix."""
    pairs = []
    entries = [e for e in text.split(",") if e.strip()]
    if not entries:
        raise DeepShareError(f"model mix {text!r}: expected 'model:weight,...', e.g. 'MoE:2,DLRM:1'")
    for entry in entries:
        model, sep, weight = entry.rpartition(":")
        if not sep or not model.strip():
            raise DeepShareError(f"model mix {text!r}: entry {entry.strip()!r}: expected 'model:weight'")
        name = model.strip()
        if not on_one_line(name) or len(name) > MAX_FLAG_NAME_CHARS:
            raise DeepShareError(f"model mix {shown(text)}: model {shown(name)}: expected a name of 1-{MAX_FLAG_NAME_CHARS} "
                                 "characters on one line (no line breaks, NUL characters or bytes that are not UTF-8)")
        w = float(weight) if NUMBER.fullmatch(weight.strip()) else math.nan
        if not (math.isfinite(w) and w > 0):
            raise DeepShareError(
                f"model mix {text!r}: entry {entry.strip()!r}: weight must be a positive number, got {weight.strip()!r}"
            )
        pairs.append((name, w))
    return ModelMix(tuple(pairs))


def mix_from_spec(spec: str | ModelMix | None, catalog: Catalog | None = None) -> ModelMix:
    """A preset name, a ``"model:weight,..."`` string, a ModelMix, or None (= ``random``)."""
    if isinstance(spec, ModelMix):
        return spec
    if spec is None:
        return mix_preset("random", catalog)
    if spec.strip() in MIX_PRESETS:
        return mix_preset(spec.strip(), catalog)
    if ":" not in spec:
        raise DeepShareError(
            f"model mix {spec!r}: expected a preset ({', '.join(MIX_PRESETS)}) or 'model:weight,...'"
        )
    return parse_mix(spec)


def assign(n: int, mix: ModelMix, rng: np.random.Generator) -> list[str]:
    """Draw ``n`` model names independently from ``mix`` (deterministic for a seeded ``rng``)."""
    if n < 0:
        raise DeepShareError(f"cannot assign models to {n} jobs")
    if n == 0:
        return []
    probs = mix.probabilities
    models = list(probs)
    p = np.array([probs[m] for m in models], dtype=float)
    p /= p.sum()
    return [models[i] for i in rng.choice(len(models), size=n, p=p)]
