"""The cells of a suite: one generated trace on one cluster under one contention model and one
information model (see :mod:`deepshare.experiments.suite`), and what each cell's runs are built from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from deepshare.core.contention import ContentionModel, make_contention
from deepshare.core.information import CONTENTION_KNOWLEDGE, DURATIONS, InformationModel
from deepshare.core.jct_bound import avg_jct_bound
from deepshare.core.topology import Topology, load_topology, uniform
from deepshare.core.traces import RecurrenceModel, generate, mix_preset
from deepshare.core.traces.generator import parse_demand
from deepshare.experiments.pooled_ideal import pooled_ideal_avg_jct
from deepshare.experiments.suite_spec import SUITE_SEED_BASE, SuiteSpec


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

    def with_durations(self, durations: str) -> "Cell":
        """The same scenario under another information model of job lengths."""
        return replace(self, durations=durations)

    def with_knowledge(self, knowledge: str) -> "Cell":
        """The same scenario and durations under another contention knowledge."""
        return replace(self, knowledge=knowledge)

    def information(self, spec: "SuiteSpec") -> InformationModel:
        """What its policies know; estimates (and measurement noise) drawn with its trace seed."""
        return InformationModel(self.durations, spec.estimate_error, self.seed, contention_knowledge=self.knowledge)


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
