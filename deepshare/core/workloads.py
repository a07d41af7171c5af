"""Model catalog: isolated throughput by (model, GPUs, nodes), from the measured profiles.

The shipped profiles (``deepshare/data/profiles``, see its README for provenance) were measured
for six models at 2/4/8 GPUs spread over 2/4/8 nodes. Everything else is estimated, by rules
that are documented here and in ``docs/simulator.md``:

* **Node count not measured** (1 node, 3 nodes, more than the largest measured count): a
  single-node job does not cross the network, so it runs at least as fast as the best measured
  spread of the same GPU count, and that best value is used. Between measured node counts the
  throughput is interpolated linearly in the node count; beyond the largest it is held at the
  largest measured count's value.
* **GPU count not measured** (1, 3, 5-7, 16+): per-GPU throughput is taken from the nearest
  measured GPU count (ties go to the larger) and scaled linearly with the GPU count.
* **Model not in the catalog** (``vgg19``, ``resnet50``, ...): the model is mapped to a proxy
  catalog model of the same family (:data:`FAMILY_PROXIES`), or to :data:`DEFAULT_PROXY` when
  no family matches; a warning names each of the first :data:`WARNED_NAMES` unknown names, and
  past them one line per doubling of their count says how many more were proxied. The LLM-era classes
  (:data:`DERIVED_CLASSES`, whose contention parameters are derived in
  ``deepshare.core.contention.link.llm``) have a fixed proxy and no warning. Traces that give work as a
  duration make the proxy's absolute throughput irrelevant: only its contention matters.

The *reference throughput* of a (model, GPUs) pair is its throughput on the fewest nodes it can
occupy on the testbed (8 GPUs a node); a duration in a trace means seconds at that rate.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_THROUGHPUT, MIN_MEASURED_THROUGHPUT, MIN_WORK_S
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.core.names import has_control_character
from deepshare.core.written import NUMBER

if TYPE_CHECKING:
    from deepshare.core.types import JobSpec

log = logging.getLogger(__name__)

REFERENCE_GPUS_PER_NODE = 8

FAMILY_PROXIES: tuple[tuple[str, str], ...] = (
    # (lower-case name prefix, catalog model). Dense CNNs whose gradients are large and
    # all-reduced every step behave like the measured heavy communicator FSDP; small CNNs
    # like MobileNetV3; attention language models like Transformer-XL.
    ("vgg", "FSDP"),
    ("alexnet", "FSDP"),
    ("resnet", "MobileNetV3"),
    ("inception", "MobileNetV3"),
    ("mobilenet", "MobileNetV3"),
    ("efficientnet", "MobileNetV3"),
    ("densenet", "MobileNetV3"),
    ("shufflenet", "MobileNetV3"),
    ("squeezenet", "MobileNetV3"),
    ("cnn", "MobileNetV3"),
    ("bert", "Transformer-XL"),
    ("gpt", "Transformer-XL"),
    ("transformer", "Transformer-XL"),
    ("llama", "FSDP"),
    ("t5", "Transformer-XL"),
    ("lstm", "Transformer-XL"),
    ("rnn", "Transformer-XL"),
    ("seq2seq", "Transformer-XL"),
    ("deepspeech", "Transformer-XL"),
    ("dlrm", "DLRM"),
    ("ncf", "DLRM"),
    ("deepfm", "DLRM"),
    ("wide", "DLRM"),
    ("recommend", "DLRM"),
    ("graphsage", "GraphSage"),
    ("gcn", "GraphSage"),
    ("gat", "GraphSage"),
    ("gnn", "GraphSage"),
    ("moe", "MoE"),
    ("mixtral", "MoE"),
    ("switch", "MoE"),
    ("fsdp", "FSDP"),
)
DERIVED_CLASSES: dict[str, str] = {
    # LLM-era classes whose link parameters are derived from their size and parallelism
    # (deepshare.core.contention.link.llm) -> the measured model whose profile gives their
    # isolated throughput scaling across node counts (their traffic pattern's kin). Known
    # names: resolved without the unknown-model warning.
    "llama3-8b": "FSDP",
    "llama3-70b": "FSDP",
    "gpt3-175b": "FSDP",
    "mixtral-8x7b": "MoE",
    "vit-h14": "Transformer-XL",
}
DEFAULT_PROXY = "Transformer-XL"
"""Proxy for unknown models: the measured model with median contention sensitivity."""
MEMO_ENTRIES = 16_384
"""The most entries each of a catalog's memos holds (the oldest goes first). They are keyed by
the model names asked, which a placement request chooses: unbounded, one request of 15,000 new
names grew the service by tens of MB for good. A simulation asks for a few names millions of
times and stays far below it."""
WARNED_NAMES = 100
"""Unknown model names a catalog names in a warning each; past them, one line per doubling of
their count (a request may name thousands, and each was a line of the service's log)."""
COUNTED_NAMES = MEMO_ENTRIES
"""The unknown names past :data:`WARNED_NAMES` a catalog remembers having counted (the oldest goes
first): its count of them is of distinct names up to this many; past it, a name asked again after
this many others were counted is counted again (exact distinct counting would need memory that
grows with the names callers invent)."""


def remember(memo: dict, key: object, value: object, most: int = MEMO_ENTRIES) -> None:
    """``memo[key] = value``, first dropping the oldest entry when ``memo`` holds ``most``: a memo
    keyed by callers' names stays bounded, and a hit costs what a plain dict's does.

    A placement replica's decision threads share the catalog's memos without a lock: two threads
    evicting at the bound may pick the same oldest key, or one may add while the other looks for
    it; either way the memo stays a memo (an entry dropped early is computed again), so a lost
    race is passed over rather than raised."""
    if len(memo) >= most:
        try:
            del memo[next(iter(memo))]
        except (KeyError, RuntimeError, StopIteration):  # another thread evicted or added meanwhile
            pass
    memo[key] = value


@dataclass(frozen=True, slots=True)
class ProfileKey:
    model: str
    gpus: int
    nodes: int

    def __str__(self) -> str:
        return f"{self.model},{self.gpus},{self.nodes}"

    @staticmethod
    def parse(text: str) -> "ProfileKey":
        """``MODEL,GPUS,NODES`` as a profile table writes it (ValueError when it is not one)."""
        return _profile_key(text, "profile key")


class Catalog:
    """Isolated throughputs, pairwise contention ratios and communication classes of models."""

    def __init__(
        self,
        isolated: dict[ProfileKey, float],
        ratios: dict[tuple[ProfileKey, ProfileKey], float],
    ) -> None:
        self.isolated = dict(isolated)
        self.ratios = dict(ratios)
        self.models: tuple[str, ...] = tuple(dict.fromkeys(k.model for k in isolated))
        self._gpu_counts: dict[str, tuple[int, ...]] = {
            m: tuple(sorted({k.gpus for k in isolated if k.model == m})) for m in self.models
        }
        self._node_counts: dict[tuple[str, int], tuple[int, ...]] = {}
        for k in isolated:
            self._node_counts.setdefault((k.model, k.gpus), ())
            self._node_counts[(k.model, k.gpus)] = tuple(sorted({*self._node_counts[(k.model, k.gpus)], k.nodes}))
        self.keys: tuple[ProfileKey, ...] = tuple(dict.fromkeys(k for pair in ratios for k in pair))
        self._key_index = {k: i for i, k in enumerate(self.keys)}
        self.ratio_matrix: tuple[tuple[float, ...], ...] = tuple(
            tuple(ratios.get((v, a), 1.0) for a in self.keys) for v in self.keys
        )
        """``ratio_matrix[key_index(victim)][key_index(aggressor)]``: the table with int indices."""
        self._lower = {m.lower(): m for m in self.models}
        self._resolved: dict[str, str] = {}
        self._thp_cache: dict[tuple[str, int, int], float] = {}
        self._thp_by_name: dict[tuple[str, int, int], float] = {}
        self._index_cache: dict[tuple[str, int, int], int] = {}
        self._warned: set[str] = set()
        self._counted: dict[str, None] = {}
        """Unknown names past the first :data:`WARNED_NAMES` already counted (bounded: at most
        :data:`COUNTED_NAMES`, apart from ``_resolved``, whose eviction by any lookup must not
        make a name count twice)."""
        self._unwarned = 0
        """Distinct unknown names proxied past the first :data:`WARNED_NAMES` (see
        :data:`COUNTED_NAMES` for past how many it may count a name again)."""
        self.comm_class: dict[str, str] = self._derive_comm_classes()

    # -- model names -------------------------------------------------------------------------
    def resolve(self, model: str) -> str:
        """The catalog model that stands for ``model`` (itself when profiled; see module doc)."""
        hit = self._resolved.get(model)
        if hit is not None:
            return hit
        lower = model.lower()
        if lower in self._lower:
            hit = self._lower[lower]
        elif lower in DERIVED_CLASSES and DERIVED_CLASSES[lower] in self.models:
            hit = DERIVED_CLASSES[lower]
        else:
            hit = next((proxy for prefix, proxy in FAMILY_PROXIES if lower.startswith(prefix)), DEFAULT_PROXY)
            if hit not in self.models:
                hit = self.models[0]
            self._warn_unknown(model, hit)
        remember(self._resolved, model, hit)
        return hit

    def _warn_unknown(self, model: str, proxy: str) -> None:
        """Say that ``model`` is not in the catalog: by name for the first :data:`WARNED_NAMES`
        names (once each), then at the 1st, 2nd, 4th, 8th ... distinct name past them, with the
        count (called again for a name that ``_resolved`` forgot: it is not counted twice)."""
        if model in self._warned:
            return
        if len(self._warned) < WARNED_NAMES:
            self._warned.add(model)
            log.warning("model %r is not in the catalog; using %r's profile as its proxy", model, proxy)
            return
        if model in self._counted:
            return
        remember(self._counted, model, None, COUNTED_NAMES)
        self._unwarned += 1
        if self._unwarned & (self._unwarned - 1) == 0:
            log.warning("%d more distinct model names not in the catalog got proxies (the latest %r: %r's "
                        "profile); past the first %d, only each doubling of their count is logged%s",
                        self._unwarned, model[:128], proxy, WARNED_NAMES,
                        "" if self._unwarned <= COUNTED_NAMES else
                        f" (past {COUNTED_NAMES} of them, a name asked again after {COUNTED_NAMES} others "
                        "counts again)")

    def class_of(self, model: str) -> str:
        return self.comm_class[self.resolve(model)]

    # -- throughput --------------------------------------------------------------------------
    def throughput(self, model: str, gpus: int, nodes: int) -> float:
        """Isolated samples/s of ``model`` on ``gpus`` GPUs spread over ``nodes`` nodes
        (remembered by the name asked: an encoded step asks it for every candidate row)."""
        key = (model, gpus, nodes)
        hit = self._thp_by_name.get(key)
        if hit is None:
            hit = _throughput(self, self.resolve(model), gpus, nodes)
            remember(self._thp_by_name, key, hit)
        return hit

    def reference_throughput(self, model: str, gpus: int) -> float:
        """Throughput on the fewest testbed nodes that hold ``gpus`` GPUs (the unit of durations)."""
        return self.throughput(model, gpus, max(1, math.ceil(gpus / REFERENCE_GPUS_PER_NODE)))

    def profile_key(self, model: str, gpus: int, nodes: int) -> ProfileKey:
        """The nearest measured key for a placement (used by the pairwise-ratio lookup)."""
        m = self.resolve(model)
        g = _nearest(self._gpu_counts[m], gpus)
        measured_nodes = self._node_counts[(m, g)]
        return ProfileKey(m, g, _nearest(measured_nodes, max(nodes, measured_nodes[0])))

    def ratio(self, victim: ProfileKey, aggressor: ProfileKey) -> float:
        return self.ratios[(victim, aggressor)]

    def key_index(self, key: ProfileKey) -> int:
        """Row/column of ``key`` in :attr:`ratio_matrix`."""
        return self._key_index[key]

    def placement_index(self, model: str, gpus: int, nodes: int) -> int:
        """``key_index(profile_key(model, gpus, nodes))``, remembered: every contention state
        (one per served request) asks it for every job it rates or predicts."""
        key = (model, gpus, nodes)
        index = self._index_cache.get(key)
        if index is None:
            index = self._key_index[self.profile_key(model, gpus, nodes)]
            remember(self._index_cache, key, index)
        return index

    # -- derived -----------------------------------------------------------------------------
    def _derive_comm_classes(self) -> dict[str, str]:
        """Classify models by measured sensitivity x aggressiveness (mean ratios, measured cells).

        The product of a model's mean ratio as victim and its mean ratio as aggressor is >= 0.75
        for ``low``, >= 0.6 for ``medium`` communication and below that ``heavy``.
        """
        classes = {}
        for m in self.models:
            as_victim = [r for (v, a), r in self.ratios.items() if v.model == m and _measured(v, a)]
            as_aggr = [r for (v, a), r in self.ratios.items() if a.model == m and _measured(v, a)]
            if not as_victim or not as_aggr:
                classes[m] = "medium"
                continue
            score = (sum(as_victim) / len(as_victim)) * (sum(as_aggr) / len(as_aggr))
            classes[m] = "low" if score >= 0.75 else "medium" if score >= 0.6 else "heavy"
        return classes


def _measured(v: ProfileKey, a: ProfileKey) -> bool:
    """The artifact's ``,8,8`` rows and columns look extrapolated, not measured."""
    return v.nodes < 8 and a.nodes < 8


def _nearest(values: tuple[int, ...], x: int) -> int:
    return min(values, key=lambda v: (abs(v - x), -v))


def _throughput(cat: Catalog, model: str, gpus: int, nodes: int) -> float:
    key = (model, gpus, nodes)
    cache = cat._thp_cache
    hit = cache.get(key)
    if hit is not None:
        return hit
    counts = cat._gpu_counts[model]
    g = _nearest(counts, gpus)
    measured = cat._node_counts[(model, g)]
    values = {n: cat.isolated[ProfileKey(model, g, n)] for n in measured}
    if nodes <= 1:
        base = max(values.values())
    elif nodes in values:
        base = values[nodes]
    elif nodes > measured[-1]:
        base = values[measured[-1]]
    elif nodes < measured[0]:
        base = values[measured[0]]
    else:
        lo = max(n for n in measured if n < nodes)
        hi = min(n for n in measured if n > nodes)
        base = values[lo] + (values[hi] - values[lo]) * (nodes - lo) / (hi - lo)
    result = base * gpus / g
    remember(cache, key, result)  # catalog models only, but any GPU and node counts a request names
    return result


def _read_csv(text: str, name: str) -> list[tuple[int, list[str]]]:
    """The non-empty rows of ``text``, each with the line it starts on (a quoted field may span
    lines); a row the csv module cannot read (a field over its 131,072-character limit, a NUL
    byte) is a ValueError naming ``name`` and the line, as the tables' other errors are."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    rows, ended = [], 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return rows
        except csv.Error as exc:
            raise ValueError(f"{name} row {ended + 1}: expected CSV, {exc}") from None
        if row:
            rows.append((ended + 1, row))
        ended = reader.line_num


PROFILE_COUNT = re.compile(r"[0-9]{1,9}")
"""A GPU or node count as a profile key (or a samples row) writes it: ASCII digits (``int`` also reads ``1_0`` and
other scripts' digits), few enough to compare with :data:`~deepshare.core.bounds.MAX_JOB_GPUS`."""


def _profile_key(text: str, where: str) -> ProfileKey:
    """A profile table's ``MODEL,GPUS,NODES`` key: a model name without control characters and
    ``1 <= nodes <= gpus <= MAX_JOB_GPUS`` (a count of 0 made the contention fit fail with a
    solver's traceback, more nodes than GPUs fitted a model to nonsense)."""
    parts = text.rsplit(",", 2)
    model = parts[0].strip() if len(parts) == 3 else ""
    counts = [part.strip() for part in parts[1:]]
    if not model or has_control_character(model) or not all(PROFILE_COUNT.fullmatch(count) for count in counts):
        raise ValueError(f"{where}: expected a key 'MODEL,GPUS,NODES' (a model name without control characters "
                         f"and two whole numbers), got {one_line(text[:80])!r}")
    gpus, nodes = int(counts[0]), int(counts[1])
    if not 1 <= nodes <= gpus <= MAX_JOB_GPUS:
        raise ValueError(f"{where} ({one_line(text)}): expected 1 <= nodes <= gpus <= {MAX_JOB_GPUS:,}")
    return ProfileKey(model, gpus, nodes)


def _number(cell: str, where: str, expected: str) -> float:
    """``cell`` as a number written in ASCII (``float`` also reads ``1_0`` and other scripts'
    digits, which a table of measurements does not mean)."""
    if not NUMBER.fullmatch(cell.strip()):
        raise ValueError(f"{where}: expected {expected}, got {one_line(cell[:40])!r}")
    return float(cell)


def parse_profiles(isolated_csv: str, ratio_csv: str) -> Catalog:
    """Build a catalog from the artifact's ``isolated_thp.csv`` and ``shared_thp_ratio.csv``.

    Throughputs are numbers from :data:`~deepshare.core.bounds.MIN_MEASURED_THROUGHPUT` to
    :data:`~deepshare.core.bounds.MAX_THROUGHPUT` samples a second, ratios numbers in (0, 1]
    (co-located over isolated throughput), and every ratio row has a cell per column: an infinite,
    negative or missing measurement made the contention fit fail with a solver's traceback, or
    fit a model to nonsense silently."""
    isolated: dict[ProfileKey, float] = {}
    first: dict[ProfileKey, int] = {}  # the line each key was given on: a second one is refused
    for line, row in _read_csv(isolated_csv, "isolated_thp.csv")[1:]:
        where = f"isolated_thp.csv row {line}"
        if len(row) < 2:
            raise ValueError(f"{where}: expected '\"MODEL,GPUS,NODES\",throughput', got {len(row)} field")
        key = _profile_key(row[0], where)
        value = _number(row[1], f"{where} ({key})", "a throughput")
        if not MIN_MEASURED_THROUGHPUT <= value <= MAX_THROUGHPUT:
            raise ValueError(f"{where} ({key}): expected a throughput from "
                             f"{MIN_MEASURED_THROUGHPUT:g} to {MAX_THROUGHPUT:g} samples/s, got {row[1]!r}")
        if key in first:
            raise ValueError(f"{where}: {key} is also on row {first[key]}; each key once")
        first[key] = line
        isolated[key] = value
    rows = _read_csv(ratio_csv, "shared_thp_ratio.csv")
    if not rows:
        raise ValueError("shared_thp_ratio.csv: empty; expected a header row of aggressor keys")
    header = [_profile_key(h, f"shared_thp_ratio.csv row {rows[0][0]}, column {i}") for i, h in enumerate(rows[0][1][1:], 2)]
    if len(set(header)) != len(header):
        again = next(i for i, k in enumerate(header) if k in header[:i])
        raise ValueError(f"shared_thp_ratio.csv row {rows[0][0]}: column {again + 2} ({header[again]}) is also column "
                         f"{header.index(header[again]) + 2}; each key once")
    ratios = {}
    first.clear()
    for line, row in rows[1:]:
        victim = _profile_key(row[0], f"shared_thp_ratio.csv row {line}")
        where = f"shared_thp_ratio.csv row {line} ({victim})"
        if len(row) - 1 != len(header):
            raise ValueError(f"{where}: {len(row) - 1} ratios for {len(header)} columns")
        if victim in first:
            raise ValueError(f"{where}: also on row {first[victim]}; each victim once")
        if victim not in isolated:  # a ratio's jobs need their isolated throughputs: a key missing
            # there (a typo) lost its whole row and column from the contention fit, silently
            raise ValueError(f"{where}: the victim is not in isolated_thp.csv")
        first[victim] = line
        for aggressor, cell in zip(header, row[1:]):
            ratio = _number(cell, where, "ratios in (0, 1]")
            if not 0 < ratio <= 1:
                raise ValueError(f"{where}: expected ratios in (0, 1], got {cell!r}")
            ratios[(victim, aggressor)] = ratio
    for i, aggressor in enumerate(header, 2):
        if aggressor not in isolated:
            raise ValueError(f"shared_thp_ratio.csv row {rows[0][0]}, column {i}: aggressor {aggressor} is not in "
                             "isolated_thp.csv")
    return Catalog(isolated, ratios)


def load_profiles(folder: str | os.PathLike[str]) -> Catalog:
    """A catalog from a folder holding ``isolated_thp.csv`` and ``shared_thp_ratio.csv``."""
    base = Path(folder)
    if not os.path.isdir(base):  # False, not OSError, for a name too long or a path through a file
        raise DeepShareError(f"--profiles {folder}: not a folder")
    texts = []
    for name in ("isolated_thp.csv", "shared_thp_ratio.csv"):
        missing = "missing; a profiles folder holds isolated_thp.csv and shared_thp_ratio.csv"
        texts.append(read_input_text(base / name, "profile table", CONFIG_BYTES, not_found=missing))
    try:
        return parse_profiles(*texts)
    except (ValueError, IndexError, KeyError) as exc:
        raise DeepShareError(
            f"{base}: malformed profiles ({exc}); expected rows '\"MODEL,GPUS,NODES\",value' and a square ratio table"
        ) from None


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The catalog built from the profiles shipped in the package."""
    folder = resources.files("deepshare.data") / "profiles"
    return parse_profiles(
        (folder / "isolated_thp.csv").read_text(encoding="utf-8"),
        (folder / "shared_thp_ratio.csv").read_text(encoding="utf-8"),
    )


def check_sample_work(specs: Sequence["JobSpec"], catalog: Catalog) -> None:
    """Refuse a job given in samples whose isolated run time (``total_samples`` over the
    catalog's reference throughput for its model and GPU count) is below
    :data:`~deepshare.core.bounds.MIN_WORK_S` or past :data:`~deepshare.core.bounds.MAX_DURATION_S`,
    the bounds a job given in seconds meets at its reader. Only here is the catalog known: a trace's 10^18 samples of DLRM on 8 GPUs ran
    627,000 years, and with rounds every 300 s the run never ended."""
    for spec in specs:
        if spec.total_samples is None:
            continue
        thp = catalog.reference_throughput(spec.model, spec.gpus)
        run_s = spec.total_samples / thp
        if not MIN_WORK_S <= run_s:
            raise DeepShareError(
                f"job {spec.job_id!r}: field 'total_samples': expected at least {MIN_WORK_S:g} s of isolated run time "
                f"({MIN_WORK_S * thp:.4g} samples of {spec.model} on {spec.gpus} GPUs at {thp:.4g} samples/s), "
                f"got {spec.total_samples!r} ({run_s:.3g} s)"
            )
        if not run_s <= MAX_DURATION_S:
            raise DeepShareError(
                f"job {spec.job_id!r}: field 'total_samples': expected at most a year of isolated run time "
                f"({MAX_DURATION_S:,.0f} s: {MAX_DURATION_S * thp:.4g} samples of {spec.model} on {spec.gpus} GPUs "
                f"at {thp:.4g} samples/s), got {spec.total_samples!r} ({run_s:.3g} s)"
            )
