"""The benchmark suite: policies judged on a grid of generated scenarios, not on one trace.

A suite file (``deepshare/data/suites/NAME.yaml`` or any path) names the grid: offered loads,
model mixes, cluster sizes (nodes x GPUs per node of the testbed's node type), contention
models and trace seeds, the heuristics and the learned policies. Every combination is a
*cell*: one generated Poisson trace (:func:`deepshare.core.traces.generate`, lognormal
durations with ``duration_sigma``) simulated under every policy.

Per cell the *best heuristic* is the one with the least average JCT; a learned policy's ratios
are its average JCT / that heuristic's and its p99 JCT / that heuristic's p99. The summary gives
each learned policy's geometric-mean average-JCT ratio over the cells and its worst cells.

Room: per cell the suite also computes a *lower bound* on the average JCT that no scheduler can
beat (:mod:`deepshare.core.jct_bound`: every job runs at its fastest isolated placement the
moment it arrives, no queueing, no contention). ``room`` = bound / best heuristic's average JCT is
the ratio a perfect scheduler would reach against that heuristic (an optimistic limit: the true
optimum lies between). Its geometric mean over the cells says how low any policy's
geometric-mean ratio could go: when it is near 1 the traces hardly queue and no policy can beat
the heuristics by much there.

Pooled ideal: the bound ignores queueing, which on a loaded trace is most of a JCT. Per trace the
suite also runs the *pooled ideal* (:mod:`deepshare.experiments.pooled_ideal`): the same jobs on
one node of all the cluster's GPUs, no contention, free preemption, shortest remaining
GPU-service first. ``best_over_pooled`` = best heuristic / pooled ideal is what nodes, contention
and restores cost the best heuristic over an ideal SRSF (a reference, not a bound).

Information models: a suite lists the ``durations`` its cells run under (``exact``,
``estimated``, ``unknown``: :mod:`deepshare.core.information`); each is a cell of its own on the
same trace, with its own best heuristic, so every policy is judged against the best heuristic
that knew what it knew. ``cost_of_not_knowing`` = a cell's best heuristic's average JCT / the
best heuristic's of the same scenario under ``exact`` (when the suite lists ``exact``): what not
knowing job lengths costs the strongest rule. Estimates are drawn with the cell's trace seed, so
every policy of a cell sees the same ones.

Contention knowledge: a suite lists the ``contention_knowledge`` its cells run under (``exact``:
predictions from the simulation's own model; ``learned``: from a model fitted online to measured
throughputs, :mod:`deepshare.core.contention.learned`); each is a cell of its own on the same trace,
like ``durations``. ``perturb_contention: S`` runs every cell's simulation on a world whose
sensitivities are drawn within ``1 +- S`` of the shipped ones (:mod:`deepshare.core.contention.world`,
seed ``perturb_seed``), so that learning has something to learn; ``exact`` cells then know the
perturbed truth. ``learned_over_exact`` = a policy's average JCT under ``learned`` / its own under
``exact`` on the same scenario: what learning contention instead of knowing it costs the policy.

Seeds: training draws its generated traces' seeds from ``[0, 2**31)`` (``deepshare/rl/env.py``:
``rng.integers(2**31)``), so suite traces use seeds from :data:`SUITE_SEED_BASE` = ``2**31`` up:
no suite trace is ever a training trace. A cell's trace depends on (load, mix, cluster size,
seed) only, so the ``profiled`` and ``link`` cells of the same scenario share one trace.

Runs are deterministic: the simulator and the policies are, every (cell, policy) run is
independent, and results are keyed by cell and policy, so ``workers`` > 1 (processes) and
``on_ray`` (one Ray task per run across a cluster, :mod:`deepshare.experiments.ray_runs`) give
the same numbers as one process.

Failures: a run that raises is kept as a failed result (every metric None and its ``error``),
shown in the tables and the JSON (``"failed"``), never dropped; the cells where a policy or the
best heuristic failed are left out of that policy's summary (``failed_cells`` counts them).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Callable, Generator, Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deepshare.core.contention import CONTENTION_MODELS, ContentionModel, make_contention
from deepshare.core.jct_bound import avg_jct_bound
from deepshare.core.simulator import Simulator
from deepshare.core.topology import Topology, load_topology, uniform
from deepshare.core.traces import MIX_PRESETS, RecurrenceModel, generate, mix_preset
from deepshare.core.traces.generator import parse_demand
from deepshare.core.errors import DeepShareError
from deepshare.core.information import (
    CONTENTION_KNOWLEDGE, DEFAULT_DURATIONS, DEFAULT_ESTIMATE_ERROR, DURATIONS, MAX_ESTIMATE_ERROR, InformationModel,
)
from deepshare.core.yamlspec import parse_yaml_model, read_config_text
from deepshare.experiments.pooled_ideal import pooled_ideal_avg_jct

SUITE_SEED_BASE = 2**31
"""First suite trace seed: training's generated traces use seeds below it."""
METRICS = ("avg_jct_s", "p99_jct_s", "gpu_util", "useful_util", "makespan_s", "finished")
FABRIC_METRICS = ("avg_slowdown", "fragmentation_share", "large_gang_avg_queue_s", "preemptions")
"""What a fabric preset's cells keep besides :data:`METRICS`, with ``cross_domain_share_<level>``
for each of its fabric levels."""


class SuiteSpec(BaseModel):
    """A suite file. Every field has a default except the policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "suite"
    jobs_per_node: int = Field(10, gt=0, le=1000)
    """Jobs per trace = this x the cluster's nodes (so a larger cluster sees a longer trace)."""
    loads: tuple[float, ...] = (0.7, 1.0, 1.3)
    mixes: tuple[str, ...] = ("random", "heavy")
    clusters: tuple[tuple[int, int], ...] = ((16, 8), (64, 8))
    """(nodes, GPUs per node) of the testbed's node type."""
    fabrics: tuple[str, ...] = ()
    """Cluster presets (``deepshare clusters list``) run besides ``clusters``: multi-level fabrics
    with their own hardware. A preset's cells report the fabric metrics too (:data:`FABRIC_METRICS`)."""
    demand: str | None = None
    """Jobs' GPU demand: ``gpus:weight,...`` or a preset (``gang-heavy``); null: the generator's
    default (2, 4 and 8 GPUs)."""
    required_level: str | None = None
    required_share: float | None = Field(None, ge=0, le=1)
    """The share of jobs that require one domain of ``required_level`` (both or neither)."""
    preferred_level: str | None = None
    preferred_share: float | None = Field(None, ge=0, le=1)
    """The share of jobs that prefer one domain of ``preferred_level`` (both or neither)."""
    contention: tuple[str, ...] = ("profiled", "link")
    seeds: int = Field(2, gt=0, le=100)
    """Trace seeds per scenario: SUITE_SEED_BASE + 0 .. seeds - 1."""
    duration_sigma: float = Field(1.0, ge=0, le=5)
    median_duration_s: float = Field(3600.0, gt=0)
    recurrence: dict[str, int | float] | None = None
    """Generate traces with users, recurring groups and time limits: the parameters of
    :class:`~deepshare.core.traces.RecurrenceModel` (``{}`` for its defaults); null: plain
    Poisson traces with no job features."""
    durations: tuple[str, ...] = (DEFAULT_DURATIONS,)
    """Information models the cells run under (each a cell of its own on the same trace)."""
    estimate_error: float = Field(DEFAULT_ESTIMATE_ERROR, ge=0, le=MAX_ESTIMATE_ERROR)
    """Lognormal sigma of the estimates drawn under ``estimated``."""
    contention_knowledge: tuple[str, ...] = ("exact",)
    """What the cells' policies know of contention (each a cell of its own on the same trace)."""
    perturb_contention: float | None = Field(None, ge=0, le=0.95)
    """Run the simulations on a world whose sensitivities are drawn within ``1 +- S`` of the
    shipped ones; null: the shipped model is the truth."""
    perturb_seed: int = Field(0, ge=0)
    """Seed of that draw (one world for every cell)."""
    heuristics: tuple[str, ...]
    learned: tuple[str, ...] = ()
    challengers: tuple[str, ...] = ()
    """Heuristics (listed under ``heuristics`` too) judged like learned policies: against each
    cell's best of the *other* heuristics, the anchors. The fabric suite's contention-aware
    placements are challengers of the topology-aware anchors (BestFit, balanced)."""

    @property
    def anchors(self) -> tuple[str, ...]:
        """The heuristics a cell's best heuristic is chosen from: all but the challengers."""
        return tuple(h for h in self.heuristics if h not in self.challengers)

    @property
    def judged(self) -> tuple[str, ...]:
        """The policies judged against each cell's best anchor: challengers, then learned ones."""
        return (*self.challengers, *self.learned)

    @field_validator("loads")
    @classmethod
    def _loads(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or not all(math.isfinite(x) and 0 < x <= 10 for x in v):
            raise ValueError("expected one or more loads in (0, 10]")
        return v

    @field_validator("mixes")
    @classmethod
    def _mixes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in v if m not in MIX_PRESETS]
        if not v or bad:
            raise ValueError(f"unknown mix(es) {bad}; expected some of {sorted(MIX_PRESETS)}")
        return v

    @field_validator("clusters")
    @classmethod
    def _clusters(cls, v: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        if not all(0 < n <= 1024 and 0 < g <= 64 for n, g in v):
            raise ValueError("expected [nodes, gpus_per_node] pairs with 1..1024 nodes and 1..64 GPUs")
        return v

    @field_validator("fabrics")
    @classmethod
    def _fabrics(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        from deepshare.core.topology import preset_names

        bad = [f for f in v if f not in preset_names()]
        if bad or len(set(v)) != len(v):
            raise ValueError(f"expected distinct cluster presets of {preset_names()}, got {list(v)}")
        return v

    @field_validator("demand")
    @classmethod
    def _demand(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_demand(v)
            except DeepShareError as exc:
                raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _grid(self) -> "SuiteSpec":
        strangers = [c for c in self.challengers if c not in self.heuristics]
        if strangers:
            raise ValueError(f"challengers: {strangers} are not listed under heuristics")
        if not self.anchors:
            raise ValueError("challengers: at least one heuristic must stay an anchor (not a challenger)")
        if not self.clusters and not self.fabrics:
            raise ValueError("expected one or more clusters or fabrics")
        for level, share in (("required_level", "required_share"), ("preferred_level", "preferred_share")):
            if (getattr(self, level) is None) != (getattr(self, share) is None):
                raise ValueError(f"{level} and {share}: give both or neither")
        return self

    @field_validator("contention")
    @classmethod
    def _contention(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [c for c in v if c not in CONTENTION_MODELS]
        if not v or bad:
            raise ValueError(f"unknown contention model(s) {bad}; expected some of {sorted(CONTENTION_MODELS)}")
        return v

    @field_validator("recurrence")
    @classmethod
    def _recurrence(cls, v: dict[str, int | float] | None) -> dict[str, int | float] | None:
        if v is not None:
            try:
                RecurrenceModel(**v)
            except TypeError as exc:
                raise ValueError(f"unknown recurrence parameter ({exc}); expected some of "
                                 f"{[f.name for f in fields(RecurrenceModel)]}") from None
            except DeepShareError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("durations")
    @classmethod
    def _durations(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [d for d in v if d not in DURATIONS]
        if not v or bad or len(set(v)) != len(v):
            raise ValueError(f"expected one or more distinct information models of {list(DURATIONS)}, got {list(v)}")
        return v

    @field_validator("contention_knowledge")
    @classmethod
    def _knowledge(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [k for k in v if k not in CONTENTION_KNOWLEDGE]
        if not v or bad or len(set(v)) != len(v):
            raise ValueError(f"expected one or more distinct contention knowledge models of {list(CONTENTION_KNOWLEDGE)}, "
                             f"got {list(v)}")
        return v

    @field_validator("heuristics")
    @classmethod
    def _heuristics(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("expected at least one heuristic")
        return v


@dataclass(frozen=True)
class Cell:
    load: float
    mix: str
    nodes: int
    gpus_per_node: int
    contention: str
    seed: int
    durations: str = "exact"
    knowledge: str = "exact"
    """What its policies know of contention (``contention_knowledge``)."""
    cluster: str = ""
    """The cluster preset the cell runs on (``fabrics``); empty: ``nodes`` x ``gpus_per_node``
    testbed-type nodes."""

    @property
    def label(self) -> str:
        return f"{self.scenario_label} {self.information_label}"

    @property
    def scenario_label(self) -> str:
        """The label without the information model (what a cell's siblings share)."""
        size = self.cluster or f"{self.nodes}x{self.gpus_per_node}"
        return f"load {self.load:g} {self.mix} {size} {self.contention} seed {self.seed - SUITE_SEED_BASE}"

    @property
    def information_label(self) -> str:
        """``exact``, ``estimated``, ...; with ``+learned`` when contention is learned."""
        return self.durations + ("" if self.knowledge == "exact" else f"+{self.knowledge}")

    def key(self) -> dict[str, object]:
        """The cell's identity as a suite's JSON holds it (``cluster`` only for a preset's cell)."""
        key: dict[str, object] = {
            "load": self.load, "mix": self.mix, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
            "contention": self.contention, "seed": self.seed, "durations": self.durations,
            "contention_knowledge": self.knowledge}
        if self.cluster:
            key["cluster"] = self.cluster
        return key

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> "Cell":
        """The cell whose :meth:`key` (as a suite's JSON holds it, other fields beside) is ``key``;
        files written before the information models count as ``exact``."""
        return cls(key["load"], key["mix"], key["nodes"], key["gpus_per_node"], key["contention"], key["seed"],
                   key.get("durations", "exact"), key.get("contention_knowledge", "exact"), key.get("cluster", ""))

    def _rank(self) -> tuple:
        return (self.load, self.mix, self.cluster, self.nodes, self.gpus_per_node, self.contention, self.seed,
                DURATIONS.index(self.durations), CONTENTION_KNOWLEDGE.index(self.knowledge))

    def __lt__(self, other: "Cell") -> bool:
        """Sorted by scenario, then from the most to the least known (exact, estimated, unknown;
        contention exact before learned)."""
        return self._rank() < other._rank()

    def under(self, durations: str) -> "Cell":
        """The same scenario under another information model of job lengths."""
        return replace(self, durations=durations)

    def knowing(self, knowledge: str) -> "Cell":
        """The same scenario and durations under another contention knowledge."""
        return replace(self, knowledge=knowledge)

    def information(self, spec: "SuiteSpec") -> InformationModel:
        """What its policies know; estimates (and measurement noise) drawn with its trace seed."""
        return InformationModel(self.durations, spec.estimate_error, self.seed, contention_knowledge=self.knowledge)


def suite_names() -> list[str]:
    folder = resources.files("deepshare.data") / "suites"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _exists(path: str) -> bool:
    """Whether ``path`` exists; True when the system cannot look it up (a name too long), so that
    reading it reports the system's reason in one line."""
    try:
        return Path(path).exists()
    except OSError:
        return True


def load_suite(name_or_path: str, flag: str = "--suite") -> SuiteSpec:
    """A bundled suite by name (:func:`suite_names`) or a suite file by path; policy names are
    checked against the registry here, before anything runs. Errors name ``flag``."""
    from deepshare.policies import policy_info

    if name_or_path in suite_names():
        source = f"suite {name_or_path!r}"
        text = (resources.files("deepshare.data") / "suites" / f"{name_or_path}.yaml").read_text(encoding="utf-8")
    elif Path(name_or_path).suffix in (".yaml", ".yml") or _exists(name_or_path):
        source = name_or_path
        text = read_config_text(name_or_path, "suite file", f"{flag} {name_or_path}")
    else:
        raise DeepShareError(
            f"{flag}: {name_or_path!r} is neither a bundled suite ({', '.join(suite_names())}) nor a YAML file"
        )
    spec = parse_yaml_model(text, SuiteSpec, source, "the suite's grid and policies")
    if spec.demand is not None:
        for cell in {(c.cluster, c.nodes, c.gpus_per_node): c for c in cells(spec)}.values():
            try:
                parse_demand(spec.demand, cell_topology(cell).total_gpus)
            except DeepShareError as exc:
                where = cell.cluster or f"cluster {cell.nodes}x{cell.gpus_per_node}"
                raise DeepShareError(f"{source}: demand: {exc} ({where})") from None
    for field_name in ("heuristics", "learned"):
        for name in getattr(spec, field_name):
            try:
                info = policy_info(name)
            except DeepShareError as exc:
                raise DeepShareError(f"{source}: {field_name}: {exc}") from None
            if info.heuristic and field_name == "learned":
                raise DeepShareError(f"{source}: learned: {name!r} is not a learned policy (list it under heuristics)")
            if not info.heuristic and field_name == "heuristics":
                raise DeepShareError(f"{source}: heuristics: {name!r} is not a heuristic (list it under learned)")
    return spec


def cells(spec: SuiteSpec) -> list[Cell]:
    sizes = [(nodes, gpn, "") for nodes, gpn in spec.clusters]
    for preset in spec.fabrics:
        topology = load_topology(preset)
        sizes.append((len(topology.nodes), max(topology.capacity), preset))
    return [
        Cell(load, mix, nodes, gpn, contention, SUITE_SEED_BASE + s, durations, knowledge, cluster)
        for load in spec.loads
        for mix in spec.mixes
        for nodes, gpn, cluster in sizes
        for contention in spec.contention
        for s in range(spec.seeds)
        for durations in spec.durations
        for knowledge in spec.contention_knowledge
    ]


def cell_topology(cell: Cell) -> Topology:
    """The cluster a cell runs on: its preset, or ``nodes`` x ``gpus_per_node`` testbed nodes."""
    return load_topology(cell.cluster) if cell.cluster else uniform(cell.nodes, cell.gpus_per_node)


def cell_contention(spec: SuiteSpec, cell: Cell) -> ContentionModel:
    """The model a cell's simulation runs: its contention model, perturbed when the suite says so."""
    shipped = make_contention(cell.contention)
    if spec.perturb_contention is None:
        return shipped
    from deepshare.core.contention.world import PerturbedContention

    return PerturbedContention(shipped, spec.perturb_contention, spec.perturb_seed)


def cell_trace(spec: SuiteSpec, cell: Cell):
    """The cell's jobs (independent of the contention model)."""
    total_gpus = cell_topology(cell).total_gpus if cell.cluster else cell.nodes * cell.gpus_per_node
    return generate(
        spec.jobs_per_node * cell.nodes,
        load=cell.load,
        total_gpus=total_gpus,
        demand=None if spec.demand is None else parse_demand(spec.demand, total_gpus),
        mix=mix_preset(cell.mix),
        median_duration_s=spec.median_duration_s,
        duration_sigma=spec.duration_sigma,
        seed=cell.seed,
        recurrence=None if spec.recurrence is None else RecurrenceModel(**spec.recurrence),
        required_level=spec.required_level,
        required_share=spec.required_share,
        preferred_level=spec.preferred_level,
        preferred_share=spec.preferred_share,
    ).jobs


def cell_bound(spec: SuiteSpec, cell: Cell) -> float | None:
    """The cell's average-JCT lower bound (:func:`deepshare.core.jct_bound.avg_jct_bound`)."""
    return avg_jct_bound(cell_trace(spec, cell), cell_topology(cell))


def cell_pooled_ideal(spec: SuiteSpec, cell: Cell) -> float | None:
    """The cell's pooled-ideal average JCT (:mod:`deepshare.experiments.pooled_ideal`)."""
    return pooled_ideal_avg_jct(cell_trace(spec, cell), cell_topology(cell).total_gpus)


def pooled_ideals(spec: SuiteSpec, grid: Sequence[Cell]) -> dict[Cell, float | None]:
    """:func:`cell_pooled_ideal` of every cell, run once per trace (it ignores the contention
    model, so a trace's ``profiled`` and ``link`` cells share one run)."""
    by_trace: dict[tuple, float | None] = {}
    out = {}
    for cell in grid:
        key = (cell.load, cell.mix, cell.cluster, cell.nodes, cell.gpus_per_node, cell.seed)
        if key not in by_trace:
            by_trace[key] = cell_pooled_ideal(spec, cell)
        out[cell] = by_trace[key]
    return out


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def run_one(spec: SuiteSpec, cell: Cell, policy: str) -> dict[str, float | None]:
    """One policy on one cell: the metrics the suite keeps."""
    from deepshare.policies import make_policy

    sim = Simulator(cell_topology(cell), cell_trace(spec, cell), cell_contention(spec, cell),
                    information=cell.information(spec))
    report = sim.run(make_policy(policy))
    metrics = {key: getattr(report, key) for key in METRICS}
    if cell.cluster:
        metrics.update({key: getattr(report, key) for key in FABRIC_METRICS})
        metrics.update({f"cross_domain_share_{level}": share for level, share in report.cross_domain_share})
        metrics["rejected"] = report.rejected
    return metrics


def failed_run(error: str) -> dict[str, float | None]:
    """A run that failed: every metric None, and ``error``."""
    return {**{key: None for key in METRICS}, "error": error}  # type: ignore[dict-item]


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _task(args: tuple[SuiteSpec, Cell, str]) -> tuple[Cell, str, dict[str, float | None]]:
    spec, cell, policy = args
    try:
        return cell, policy, run_one(spec, cell, policy)
    except Exception as exc:  # noqa: BLE001 - any run's failure is reported with its cell and policy
        return cell, policy, failed_run(_why(exc))


def _cluster_task(spec: SuiteSpec, cell: Cell, policy: str, policy_file: bytes | None,
                  ) -> tuple[Cell, str, dict[str, float | None]]:
    """:func:`_task` on a Ray worker: a policy file the driver sent is first copied to this machine
    (:mod:`deepshare.experiments.policy_files`); the result keeps the driver's policy name."""
    from deepshare.experiments.policy_files import local_spec

    _single_threaded()
    try:
        runnable = policy if policy_file is None else local_spec(policy, policy_file)
    except Exception as exc:  # noqa: BLE001 - e.g. a full disk: this run fails, the suite goes on
        return cell, policy, failed_run(_why(exc))
    _, _, metrics = _task((spec, cell, runnable))
    return cell, policy, metrics


def _single_threaded() -> None:
    # workers share the cores: one torch thread each (only if torch is already there)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


@dataclass(frozen=True)
class SuiteResult:
    spec: SuiteSpec
    results: dict[Cell, dict[str, dict[str, float | None]]]
    """``{cell: {policy: {metric: value}}}``."""
    bounds: dict[Cell, float | None] = field(default_factory=dict)
    """``{cell: average-JCT lower bound}`` (:func:`cell_bound`); filled by :func:`run_suite`."""
    pooled: dict[Cell, float | None] = field(default_factory=dict)
    """``{cell: pooled-ideal average JCT}`` (:func:`pooled_ideals`); filled by :func:`run_suite`."""

    def best_heuristic(self, cell: Cell) -> str:
        """The anchor heuristic with the least average JCT in ``cell`` (every heuristic when the
        suite names no challengers)."""
        runs = self.results[cell]
        return min(self.spec.anchors, key=lambda p: (runs[p]["avg_jct_s"] or math.inf, p))

    def error(self, cell: Cell, policy: str) -> str | None:
        """Why ``policy``'s run on ``cell`` failed; None when it ran."""
        return self.results[cell][policy].get("error")  # type: ignore[return-value]

    def failures(self) -> list[tuple[Cell, str, str]]:
        """(cell, policy, error) of every failed run, in cell order."""
        return [(cell, p, e) for cell in sorted(self.results) for p in self.results[cell]
                if (e := self.error(cell, p)) is not None]

    def ratios(self, cell: Cell, policy: str) -> tuple[float, float] | None:
        """(avg JCT ratio, p99 JCT ratio) of ``policy`` to the cell's best heuristic; None when
        either run failed."""
        runs = self.results[cell]
        best_name = self.best_heuristic(cell)
        if self.error(cell, policy) or self.error(cell, best_name):
            return None
        best = runs[best_name]
        mine = runs[policy]
        return (mine["avg_jct_s"] / best["avg_jct_s"], mine["p99_jct_s"] / best["p99_jct_s"])  # type: ignore[operator]

    def best_avg_jct(self, cell: Cell) -> float | None:
        """The average JCT of the cell's best heuristic."""
        return self.results[cell][self.best_heuristic(cell)]["avg_jct_s"]

    def cost_of_not_knowing(self, cell: Cell) -> float | None:
        """The cell's best heuristic's average JCT / the best heuristic's of the same scenario
        under ``exact`` (1 for an ``exact`` cell; None when the suite did not run ``exact``)."""
        exact = cell.under("exact")
        if exact not in self.results:
            return None
        mine, known = self.best_avg_jct(cell), self.best_avg_jct(exact)
        return None if not mine or not known else mine / known

    def cost_summary(self) -> dict[str, dict[str, object]]:
        """Per information model other than ``exact``: the geometric mean, range and worst
        scenario of :meth:`cost_of_not_knowing` over its cells (empty without ``exact`` cells)."""
        out: dict[str, dict[str, object]] = {}
        for durations in self.spec.durations:
            if durations == "exact":
                continue
            costs = [(c, v) for c in sorted(self.results) if c.durations == durations and c.knowledge == "exact"
                     and (v := self.cost_of_not_knowing(c)) is not None]
            if costs:
                worst = max(costs, key=lambda x: x[1])
                out[durations] = {"geomean": _geomean([v for _, v in costs]), "min": min(v for _, v in costs),
                                  "max": worst[1], "worst_cell": worst[0].scenario_label, "cells": len(costs)}
        return out

    def learned_over_exact(self, cell: Cell, policy: str) -> float | None:
        """``policy``'s average JCT in ``cell`` / its own under ``exact`` contention knowledge on
        the same scenario and durations (1 for an exact cell; None when the suite did not run it)."""
        exact = cell.knowing("exact")
        if exact not in self.results:
            return None
        mine, known = self.results[cell][policy]["avg_jct_s"], self.results[exact][policy]["avg_jct_s"]
        return None if not mine or not known else mine / known

    def learning_summary(self) -> dict[str, dict[str, object]]:
        """Per policy, over the ``learned`` cells that have an ``exact`` sibling: the geometric
        mean and the worst of :meth:`learned_over_exact`, and the worst cell (empty unless the
        suite runs both)."""
        out: dict[str, dict[str, object]] = {}
        learned = [c for c in sorted(self.results) if c.knowledge != "exact" and c.knowing("exact") in self.results]
        for policy in (*self.spec.heuristics, *self.spec.learned):
            values = [(c, v) for c in learned if (v := self.learned_over_exact(c, policy)) is not None]
            if values:
                worst = max(values, key=lambda x: x[1])
                out[policy] = {"geomean": _geomean([v for _, v in values]), "min": min(v for _, v in values),
                               "max": worst[1], "worst_cell": worst[0].label, "cells": len(values)}
        return out

    def room(self, cell: Cell) -> float | None:
        """Lower bound / the best heuristic's average JCT: a perfect scheduler's ratio (<= 1)."""
        bound, best = self.bounds.get(cell), self.results[cell][self.best_heuristic(cell)]["avg_jct_s"]
        return None if bound is None or not best else bound / best

    def best_over_pooled(self, cell: Cell) -> float | None:
        """The best heuristic's average JCT / the pooled ideal's: what nodes, contention and
        restores cost it over an ideal SRSF (None when the pooled ideal was not run)."""
        pooled, best = self.pooled.get(cell), self.results[cell][self.best_heuristic(cell)]["avg_jct_s"]
        return None if not pooled or best is None else best / pooled

    def room_summary(self) -> dict[str, object]:
        """Geometric mean of :meth:`room` over the cells (the lowest geometric-mean ratio any
        policy could reach against the best heuristics) and its tightest cell."""
        rooms = [(cell, r) for cell in sorted(self.results) if (r := self.room(cell)) is not None]
        if not rooms:
            return {}
        tight = max(rooms, key=lambda x: x[1])
        over_pooled = [v for cell in sorted(self.results) if (v := self.best_over_pooled(cell)) is not None]
        return {
            "geomean_room": _geomean([r for _, r in rooms]),
            "min_room": min(r for _, r in rooms),
            "max_room": tight[1],
            "tightest_cell": tight[0].label,
            "cells": len(rooms),
            "geomean_best_over_pooled": _geomean(over_pooled) if over_pooled else None,
            "max_best_over_pooled": max(over_pooled, default=None),
        }

    def summary(self, policy: str, durations: str | None = None, knowledge: str | None = None) -> dict[str, object]:
        """Geometric-mean avg-JCT ratio to the best heuristic over the cells (those run under
        ``durations`` and ``knowledge`` when given), worst cells, and the geometric means of the
        policy's average JCT / the cell's lower bound and / its pooled ideal. Cells where the policy
        or the best heuristic failed are left out and counted (``failed_cells``)."""
        considered = [cell for cell in sorted(self.results)
                      if (durations is None or cell.durations == durations)
                      and (knowledge is None or cell.knowledge == knowledge)]
        pairs = [(cell, *r) for cell in considered if (r := self.ratios(cell, policy)) is not None]
        failed = len(considered) - len(pairs)
        if not pairs:  # every cell failed: nothing to summarise
            return {"cells": 0, "failed_cells": failed, "cells_won": 0,
                    **dict.fromkeys(("geomean_avg_jct_ratio", "worst_avg_jct_ratio", "worst_avg_cell", "worst_p99_jct_ratio",
                                     "worst_p99_cell", "geomean_avg_jct_over_bound", "geomean_avg_jct_over_pooled"))}
        avg = [a for _, a, _ in pairs]
        worst_avg = max(pairs, key=lambda x: x[1])
        worst_p99 = max(pairs, key=lambda x: x[2])

        def over(reference: Mapping[Cell, float | None]) -> list[float]:
            """The policy's average JCT / ``reference`` in each of those cells that has one."""
            return [self.results[c][policy]["avg_jct_s"] / r for c, _, _ in pairs  # type: ignore[operator]
                    if (r := reference.get(c))]

        over_bound, over_pooled = over(self.bounds), over(self.pooled)
        return {
            "geomean_avg_jct_ratio": _geomean(avg),
            "worst_avg_jct_ratio": worst_avg[1],
            "worst_avg_cell": worst_avg[0].label,
            "worst_p99_jct_ratio": worst_p99[2],
            "worst_p99_cell": worst_p99[0].label,
            "cells_won": sum(a < 1.0 for a in avg),
            "cells": len(avg),
            "failed_cells": failed,
            "geomean_avg_jct_over_bound": _geomean(over_bound) if len(over_bound) == len(avg) else None,
            "geomean_avg_jct_over_pooled": _geomean(over_pooled) if len(over_pooled) == len(avg) else None,
        }

    def heuristic_wins(self, durations: str | None = None, knowledge: str | None = None) -> dict[str, int]:
        """How many cells (under ``durations`` and ``knowledge`` when given) each heuristic is the best of."""
        wins = {h: 0 for h in self.spec.anchors}
        for cell in self.results:
            if (durations is None or cell.durations == durations) and (knowledge is None or cell.knowledge == knowledge) \
                    and self.error(cell, best := self.best_heuristic(cell)) is None:  # not when every heuristic failed
                wins[best] += 1
        return wins

    def information_models(self) -> list[tuple[str, str]]:
        """Every (durations, contention knowledge) the suite runs, most known first."""
        return [(d, k) for d in self.spec.durations for k in self.spec.contention_knowledge]

    def to_json(self) -> dict[str, object]:
        return {
            "suite": self.spec.model_dump(mode="json"),
            "seed_base": SUITE_SEED_BASE,
            "cells": [
                {
                    **cell.key(),
                    "best_heuristic": self.best_heuristic(cell),
                    "best_avg_jct_s": self.best_avg_jct(cell),
                    "cost_of_not_knowing": self.cost_of_not_knowing(cell),
                    "learned_over_exact": None if cell.knowledge == "exact" else {
                        p: self.learned_over_exact(cell, p) for p in (*self.spec.heuristics, *self.spec.learned)},
                    "jct_bound_s": self.bounds.get(cell),
                    "best_over_bound": None if (r := self.room(cell)) is None else 1.0 / r,
                    "room": r,
                    "pooled_ideal_s": self.pooled.get(cell),
                    "best_over_pooled": self.best_over_pooled(cell),
                    "results": self.results[cell],
                    "ratios": {
                        p: None if (q := self.ratios(cell, p)) is None else dict(zip(("avg_jct", "p99_jct"), q))
                        for p in self.spec.judged
                    },
                }
                for cell in sorted(self.results)
            ],
            "failed": [{**cell.key(), "policy": p, "error": e} for cell, p, e in self.failures()],
            "summary": {p: self.summary(p) for p in self.spec.judged},
            "summary_by_durations": {d: {p: self.summary(p, d) for p in self.spec.judged} for d in self.spec.durations},
            "heuristic_wins": self.heuristic_wins(),
            "heuristic_wins_by_durations": {d: self.heuristic_wins(d) for d in self.spec.durations},
            "summary_by_contention_knowledge": {
                k: {d: {p: self.summary(p, d, k) for p in self.spec.judged} for d in self.spec.durations}
                for k in self.spec.contention_knowledge},
            "heuristic_wins_by_contention_knowledge": {
                k: {d: self.heuristic_wins(d, k) for d in self.spec.durations} for k in self.spec.contention_knowledge},
            "cost_of_not_knowing": self.cost_summary(),
            "learned_over_exact": self.learning_summary(),
            "room": self.room_summary(),
        }


def run_suite(
    spec: SuiteSpec, workers: int = 1, progress: Callable[[int, int, str], None] | None = None,
    only_cells: Sequence[Cell] | None = None, on_ray: bool = False,
) -> SuiteResult:
    """Every policy on every cell (``workers`` processes, or Ray tasks with ``on_ray``; the same
    numbers either way)."""
    grid = list(only_cells) if only_cells is not None else cells(spec)
    policies = (*spec.heuristics, *spec.learned)
    results = run_policies(spec, grid, policies, workers, progress, on_ray=on_ray)
    return SuiteResult(spec, results, {cell: cell_bound(spec, cell) for cell in grid}, pooled_ideals(spec, grid))


def run_policies(
    spec: SuiteSpec, grid: Sequence[Cell], policies: Sequence[str], workers: int = 1,
    progress: Callable[[int, int, str], None] | None = None, mp_context: BaseContext | None = None,
    on_ray: bool = False,
) -> dict[Cell, dict[str, dict[str, float | None]]]:
    """``{cell: {policy: metrics}}`` for ``policies`` on ``grid`` (``workers`` processes of
    ``mp_context``, default the platform's, or with ``on_ray`` one Ray task per run on the
    cluster this process is connected to; the same numbers for any of them). Every policy is
    built once here first, so a bad name or policy file fails before any run."""
    from deepshare.policies import make_policy

    for name in policies:
        make_policy(name)
    # the slow runs first (learned policies, link contention, large clusters) so workers end together
    tasks = sorted(
        ((spec, cell, p) for cell in grid for p in policies),
        key=lambda t: (t[2] not in spec.learned, t[1].contention != "link", -t[1].nodes),
    )
    results: dict[Cell, dict[str, dict[str, float | None]]] = {cell: {} for cell in grid}
    done = 0
    pool = None
    if on_ray:
        outputs: Iterable[tuple[Cell, str, dict[str, float | None]]] = _on_ray(tasks)
    elif workers <= 1:
        outputs = map(_task, tasks)
    else:
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_single_threaded, mp_context=mp_context)
        outputs = pool.map(_task, tasks)
    try:
        for cell, policy, metrics in outputs:
            results[cell][policy] = metrics
            done += 1
            if progress is not None:
                progress(done, len(tasks), f"{policy} on {cell.label}")
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if isinstance(outputs, Generator):
            outputs.close()  # cancels the cluster's remaining tasks (Ctrl-C, an error)
    return {cell: {p: results[cell][p] for p in policies} for cell in grid}


def _on_ray(tasks: Sequence[tuple[SuiteSpec, Cell, str]]) -> Generator[tuple[Cell, str, dict[str, float | None]], None, None]:
    """The runs of ``tasks`` as Ray tasks (:func:`_cluster_task`), as they finish; the spec and each
    driver-only policy file go to the object store once; a run Ray lost is a failed run."""
    from deepshare.experiments.policy_files import driver_files
    from deepshare.experiments.ray_runs import Lost, Once, run_tasks

    specs = {id(spec): Once(spec) for spec, _, _ in tasks}
    files = {name: Once(data) for name, data in driver_files({p for _, _, p in tasks}).items()}
    calls = [(specs[id(spec)], cell, p, files.get(p)) for spec, cell, p in tasks]
    with closing(run_tasks(_cluster_task, calls)) as outputs:  # closed: the remaining tasks are cancelled
        for i, output in outputs:
            yield (*tasks[i][1:], failed_run(output.error)) if isinstance(output, Lost) else output
