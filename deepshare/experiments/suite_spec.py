"""A suite file: the grid of scenarios and the policies judged on it (see :mod:`deepshare.experiments.suite`).

:class:`SuiteSpec` validates a suite YAML field by field; :func:`load_suite` finds a bundled suite by
name or reads one by path and checks its policy names against the registry before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import fields
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deepshare.core.bounds import MAX_DURATION_S, MAX_GRID_LOAD, MIN_OFFERED_LOAD, grid_load_ok
from deepshare.core.contention import CONTENTION_MODELS
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.fabric import RACK_LEVEL
from deepshare.core.information import (
    CONTENTION_KNOWLEDGE, DEFAULT_DURATIONS, DEFAULT_ESTIMATE_ERROR, DURATIONS, MAX_ESTIMATE_ERROR,
)
from deepshare.core.topology import load_topology
from deepshare.core.traces import MIX_PRESETS, RecurrenceModel
from deepshare.core.traces.generator import check_demand_fits, parse_demand, topology_asks
from deepshare.core.yamlspec import parse_yaml_model, read_config_text

MAX_CELLS = 10_000
"""Most cells a suite's grid may have: a list of loads a few thousand long (or a typo in one)
started a run of 400,000 cells, days of CPU."""
SUITE_SEED_BASE = 2**31
"""First suite trace seed: training's generated traces use seeds below it."""


class SuiteSpec(BaseModel):
    """A suite file. Every field has a default except the policies."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = "suite"
    jobs_per_node: int = Field(10, gt=0, le=1000)
    """Jobs per trace = this x the cluster's nodes (so a larger cluster sees a longer trace)."""
    loads: tuple[float, ...] = (0.7, 1.0, 1.3)
    mixes: tuple[str, ...] = ("random", "heavy")
    clusters: tuple[tuple[int, int], ...] = ((16, 8), (64, 8))
    """(nodes, GPUs per node) of the testbed's node type."""
    fabrics: tuple[str, ...] = ()
    """Cluster presets (``deepshare clusters``) run besides ``clusters``: multi-level fabrics
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
    median_duration_s: float = Field(3600.0, gt=0, le=MAX_DURATION_S)
    """At most a year, as the generator takes it (checked here, before any cell runs)."""
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
    tenants: str | None = None
    """A tenants file (``docs/tenants.md``): a bundled one by name (:func:`tenants_names`,
    ``deepshare/data/tenants/NAME.yaml``) or a path. Every policy then runs behind its admission
    and quota preemption, and every run keeps its fairness (:data:`~deepshare.tenants.fairness.FAIRNESS_METRICS`
    and per queue); null: no tenancy (and no fairness keys in the JSON)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: object) -> object:
        """Refuse true/false anywhere in a field: the model is lax so that YAML lists can be
        tuples, and lax pydantic takes ``true`` for 1 (``seeds: true`` ran one seed,
        ``clusters: [[true, 8]]`` one node). The suite has no yes/no field. A field validator, so
        the error names the field as the others do (``seeds: Value error, got a boolean ...``)."""
        if _holds_bool(value):
            raise ValueError(f"got a boolean ({_yaml(value)}) where a number or name is expected "
                             "(YAML reads true, false, yes, no, on and off as booleans)")
        return value

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
        if not v or not all(map(grid_load_ok, v)):
            raise ValueError(f"expected one or more loads in [{MIN_OFFERED_LOAD:g}, {MAX_GRID_LOAD:g}]")
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
        for field in ("loads", "mixes", "clusters", "contention", "durations", "contention_knowledge", "heuristics",
                      "learned", "challengers"):  # a repeat ran its cells twice and collapsed into one result
            values = getattr(self, field)
            repeated = sorted({str(list(v) if isinstance(v, tuple) else v) for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{field}: {', '.join(repeated)} listed more than once")
        for policy in self.learned:
            if policy in self.heuristics:
                raise ValueError(f"learned: {policy!r} is listed under heuristics too")
        strangers = [c for c in self.challengers if c not in self.heuristics]
        if strangers:
            raise ValueError(f"challengers: {strangers} are not listed under heuristics")
        if not self.anchors:
            raise ValueError("challengers: at least one heuristic must stay an anchor (not a challenger)")
        if not self.clusters and not self.fabrics:
            raise ValueError("expected one or more clusters or fabrics")
        if self.perturb_contention is not None and "none" in self.contention:  # its cells would run unperturbed
            raise ValueError("perturb_contention: the 'none' contention model predicts no contention, so it has "
                             "nothing to perturb; list only profiled and link under contention")
        axes = {"loads": len(self.loads), "mixes": len(self.mixes), "clusters and fabrics": len(self.clusters) + len(self.fabrics),
                "contention": len(self.contention), "seeds": self.seeds, "durations": len(self.durations),
                "contention_knowledge": len(self.contention_knowledge)}
        count = math.prod(axes.values())
        if count > MAX_CELLS:
            raise ValueError(f"the grid has {count:,} cells ({' x '.join(f'{n} {k}' for k, n in axes.items())}); "
                             f"a suite runs at most {MAX_CELLS:,} (the largest bundled one has 144)")
        try:
            topology_asks(self.required_level, self.required_share, self.preferred_level, self.preferred_share)
        except DeepShareError as exc:
            raise ValueError(str(exc)) from None
        for field, level in (("required_level", self.required_level), ("preferred_level", self.preferred_level)):
            if level is not None:
                self._level_everywhere(field, level)
        return self

    def _level_everywhere(self, field: str, level: str) -> None:
        """Refuse a topology level that some cluster of the grid lacks: every job asking for it
        would be rejected in those cells (required) or refused (preferred), and their ratios
        would then compare policies on the jobs left."""
        grid = [(f"{n}x{g}", (RACK_LEVEL,)) for n, g in self.clusters]  # a flat cluster: its racks alone
        grid += [(preset, tuple(lv.name for lv in load_topology(preset).fabric.levels)) for preset in self.fabrics]
        for name, levels in grid:
            if level not in levels:
                raise ValueError(f"{field}: {level!r} is not a level of cluster {name} (its levels: {', '.join(levels)}); "
                                 f"every cluster and fabric of a suite must have the levels its jobs ask for")

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


def _holds_bool(value: object) -> bool:
    """Whether ``value`` is a boolean or a list or mapping holding one, however deep."""
    if isinstance(value, bool):
        return True
    if isinstance(value, dict):
        return any(map(_holds_bool, value.values()))
    return isinstance(value, (list, tuple)) and any(map(_holds_bool, value))


def _yaml(value: object) -> str:
    """``value`` as YAML writes it inline (booleans lower case), cut to a line."""
    import json

    return json.dumps(value, default=str)[:80]


def tenants_names() -> list[str]:
    """The bundled tenants files (``deepshare/data/tenants/NAME.yaml``)."""
    folder = resources.files("deepshare.data") / "tenants"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")) if folder.is_dir() else []


def suite_tenants(spec: SuiteSpec):  # type: ignore[no-untyped-def]
    """The suite's :class:`~deepshare.tenants.Tenants` (its ``tenants`` field: a bundled name or
    a path), or None."""
    return None if spec.tenants is None else _tenants(spec.tenants)


@lru_cache(maxsize=8)
def _tenants(name_or_path: str):  # type: ignore[no-untyped-def]
    from deepshare.tenants import parse_tenants

    return parse_tenants(*_tenants_text(name_or_path))


def _tenants_text(name_or_path: str) -> tuple[str, str]:
    """A tenants file's text (a bundled one by name, else the file at the path) and its source."""
    if name_or_path in tenants_names():
        text = (resources.files("deepshare.data") / "tenants" / f"{name_or_path}.yaml").read_text(encoding="utf-8")
        return text, f"tenants {name_or_path!r}"
    return read_config_text(name_or_path, "tenants file"), name_or_path


def tenants_content(name_or_path: str) -> dict[str, object]:
    """The tenants file's fields as loaded, those left at their defaults out and the live
    scheduler's ``tokens`` too (the simulator ignores them): the same for a bundled name and a path
    to the same content, another for a changed quota or weight (:func:`~deepshare.experiments.learning_curve.suite_fingerprint`)."""
    from deepshare.tenants.model import TenantsModel

    text, source = _tenants_text(name_or_path)
    model = parse_yaml_model(text, TenantsModel, source, "queues")
    return model.model_dump(mode="json", exclude_defaults=True, exclude={"tokens"})


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


def load_suite(name_or_path: str, flag: str = "--suite", allow_imports: bool = False,
               check_learned: bool = True) -> SuiteSpec:
    """A bundled suite by name (:func:`suite_names`) or a suite file by path; policy names are
    checked against the registry here, before anything runs. Errors name ``flag``.

    A ``module:Attribute`` policy name imports that module and calls what it names: from a
    suite file, a data file that may come from anywhere, that ran any code (``os:system=CMD``)
    before the name was even found not to be a policy. Such names are refused unless
    ``allow_imports`` (``evaluate --allow-imports``) says the file is trusted; registered names
    and installed packages' entry points (code installed on purpose) are always taken.
    ``check_learned`` False: the caller replaces ``learned`` (``train --eval-suite`` scores its own
    policy), whose names are then neither checked nor imported."""
    from deepshare.policies import policy_info
    from deepshare.policies.plugins import is_import_spec

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
        sizes = [(f"cluster {n}x{g}", n * g) for n, g in spec.clusters]
        sizes += [(preset, load_topology(preset).total_gpus) for preset in spec.fabrics]
        try:
            check_demand_fits(spec.demand, sizes)
        except DeepShareError as exc:
            raise DeepShareError(f"{source}: demand: {exc}") from None
    if spec.tenants is not None:
        try:
            suite_tenants(spec)
        except DeepShareError as exc:
            raise DeepShareError(f"{source}: tenants: {exc}") from None
    for field_name in ("heuristics", "learned") if check_learned else ("heuristics",):
        for name in getattr(spec, field_name):
            if is_import_spec(name) and not allow_imports:
                raise DeepShareError(f"{source}: {field_name}: {name.partition('=')[0]!r} would import and run Python "
                                     "code named by the suite file; `evaluate --suite FILE --allow-imports` runs a "
                                     "suite file you trust (or install the policy as a deepshare.policies entry point)")
            try:
                info = policy_info(name)
            except DeepShareError as exc:
                raise DeepShareError(f"{source}: {field_name}: {exc}") from None
            if info.heuristic and field_name == "learned":
                raise DeepShareError(f"{source}: learned: {name!r} is not a learned policy (list it under heuristics)")
            if not info.heuristic and field_name == "heuristics":
                raise DeepShareError(f"{source}: heuristics: {name!r} is not a heuristic (list it under learned)")
    _check_built(spec, source, check_learned)
    return spec


def _check_built(spec: SuiteSpec, source: str, check_learned: bool) -> None:
    """Every policy the suite names with an argument (``planner=abc``, ``srsf+packed=3``, a missing
    ``rl-base=PATH``), and every learned one, built now: a bad argument is one line naming the
    file and field before anything runs (it failed after the suite's first line, naming neither),
    and two spellings of one policy (``planner`` and ``planner=8``, ``rl-hybrid`` and the shipped
    file by path) are refused, as ``--policies`` refuses them: each ran as cells of its own."""
    from deepshare.policies import make_policy
    from deepshare.policies.registry import policy_identity

    seen: dict[tuple[object, ...], str] = {}
    for field_name in ("heuristics", "learned") if check_learned else ("heuristics",):
        for name in getattr(spec, field_name):
            if field_name == "heuristics" and "=" not in name:
                continue  # a heuristic's name is all of it (a name listed twice is refused by the schema)
            try:
                key = policy_identity(name, make_policy(name))
            except DeepShareError as exc:
                raise DeepShareError(f"{source}: {field_name}: {exc}") from None
            if key in seen:
                raise DeepShareError(f"{source}: {field_name}: {shown(seen[key])} and {shown(name)} are the same policy "
                                     "with the same argument; list it once")
            seen[key] = name
