"""The live scheduler learns contention from its journal (``--contention-knowledge learned``).

Every tick the control loop records each running job's measured throughput beside the shipped
model's prediction for its placement (the journal's ``runs`` table: ``measured_throughput``,
``predicted_throughput = catalog isolated throughput x the shipped model's ratio``). On a schedule
(``refit_s``) :class:`LiveLearning` refits the learned model
(:mod:`deepshare.core.contention.learned`) from scratch on the latest :data:`REFIT_RUNS` runs,
one observation per run (its latest measurement, ``prior ratio = predicted / isolated``,
``measured ratio = measured / isolated``): the fit is a function of the journal alone, so a
restarted scheduler, or ``deepshare calibrate --from-state DIR`` offline, gets the same numbers.

The fits are versioned in the state folder (``contention/params-NNNNN.json``, a new version only
when a fit changed) with the fit's error (the ratio MAE of the prior and of the learned model on
the runs it was fitted to); ``GET /v1/contention`` and ``deepshare contention`` show the latest.
The policies' views then predict with the learned model, over the measured link load that the
running jobs do not explain (load above what the shipped model expects of them on each link:
traffic of work the scheduler does not manage), for a ``link`` prior. A model the catalog lacks
starts from its proxy's prior and is corrected from its own jobs' reports.

**Tenants.** Fits are per model *name*, and a job's reported throughput is its own word: under
``--tenants`` one tenant's jobs naming a model, reporting false numbers, would move every
tenant's predictions for that model. So under a tenants file (and only then: a queue a user
names without one is no tenant's) the runs are grouped by tenant (:func:`tenant_group`: the
tenants the file's tokens say own the run's queue, joined with every tenant they share a queue
with, so a tenant's queues are all in one group; the admin's queues, which no tenant owns, are
one group; a queue the file no longer declares is a group of its own), each group is fitted
apart, and a model's fit is the median over the groups with evidence for each parameter: the
scale over the groups with uncontended runs of it, the exponent over those with contended runs
(a group without such runs has only the prior's value, and would vote for it). The result is
kept within a factor :data:`TENANT_FIT_BOUND` of the prior (scale within 1/2..2, exponent within
1/2..2): a minority of tenants cannot move it outside the range of the others' fits, and a
tenant with many queues votes once. When the runs are all one group's (one tenant, or no tenants
file) they are pooled and the fit is not bounded: one tenant's reports move only its own
predictions. What is left: with two groups the median is their mean, so a lying tenant still
moves the other's predictions, by at most that bound; each group's fit is shrunk toward the
prior (the fit's ridge weights), so a group with few runs pulls the median toward it; fits stay
per model name, not per (tenant, model) (which the policies' views cannot ask for today).
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from deepshare.core.atomic import write_text_atomic
from deepshare.core.contention.base import ContentionModel, ContentionState, RunningJob
from deepshare.core.contention.learned import (
    MAX_EXPONENT, MAX_RATIO, MIN_EXPONENT, MIN_RATIO, ContentionLearner, LearnedContention, ModelFit, Observation,
    mean_abs_error,
)
from deepshare.core.documents import load_json
from deepshare.core.errors import DeepShareError
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.core.topology import Topology
from deepshare.core.types import Placement
from deepshare.core.workloads import Catalog
from deepshare.runtime.defaults import DEFAULT_REFIT_S
from deepshare.runtime.journal import Journal, Measurement

if TYPE_CHECKING:
    from deepshare.tenants.spec import Tenants

log = logging.getLogger(__name__)

CONTENTION_DIR = "contention"
"""The state folder's subfolder of versioned fits."""
REFIT_RUNS = 2000
"""Runs a refit reads (the most recently started)."""
_VERSION_FILE = re.compile(r"^params-(\d{5,})\.json\Z")
MAX_VERSION = 10**12
"""The highest version a version file may hold or be named after (a refit every second for 30,000
years stays below): a larger one, edited in, named the next version's file past the 255 characters
a file name may have, and every refit failed."""
TENANT_FIT_BOUND = 2.0
"""Under a tenants file with runs of several tenants, a fit's scale and exponent are kept within
this factor of the prior's 1 (see the module doc)."""


def observations(runs: Iterable[Measurement], catalog: Catalog) -> list[Observation]:
    """One observation per run: its measured and predicted throughputs over the catalog's
    isolated throughput of its model on its placement's shape."""
    out = []
    for run in runs:
        nodes = len(run.placement)
        if nodes == 0:
            continue
        isolated = catalog.throughput(run.model, run.gpus, nodes)
        if not (isolated > 0 and math.isfinite(run.measured_throughput) and math.isfinite(run.predicted_throughput)):
            continue
        out.append(Observation(run.model, min(run.predicted_throughput / isolated, 1.0), run.measured_throughput / isolated))
    return out


def fit_document(learner: ContentionLearner, seen: Sequence[Observation], version: int, fitted_at: float,
                 prior: str) -> dict[str, object]:
    """What a version file holds: the fits, and their error on the runs they were fitted to."""
    return {
        "version": version,
        "fitted_at": fitted_at,
        "prior": prior,
        "runs": len(seen),
        "mae_prior": mean_abs_error(seen, None),
        "mae_learned": mean_abs_error(seen, learner),
        "models": {m: {"scale": f.scale, "exponent": f.exponent, "observations": f.observations, "contended": f.contended}
                   for m, f in learner.fits.items()},
    }


def fit_from_journal(journal: Journal, catalog: Catalog, prior: str, version: int = 0,
                     runs: int = REFIT_RUNS, tenants: Tenants | None = None) -> tuple[ContentionLearner, dict[str, object]]:
    """A learner fitted to ``journal``'s latest ``runs`` measured runs, and its document
    (``tenants``: the tenants file in force, None without one; see :func:`fit_runs`)."""
    measured = journal.measurements(runs)
    seen = observations(measured, catalog)
    learner = fit_runs(measured, catalog, tenants)
    return learner, fit_document(learner, seen, version, journal.now(), prior)


def tenant_group(queue: str | None, tenants: Tenants, owners: dict[str, str] | None = None) -> str:
    """Whose reports a run of ``queue`` carries under ``tenants``: ``tenant:<names>``, the tenants
    whose tokens own the queue together with every tenant linked to them by a queue they share
    (:func:`queue_owners`: a tenant owning queues alone and with others votes once, not once per
    set of co-owners); ``admin`` for a declared queue no tenant owns, or no queue (a job
    journalled before the file: only the admin's token existed); ``queue:<name>`` for a queue the
    file no longer declares (its submitter cannot be told). ``owners``: :func:`queue_owners` of
    ``tenants``, when the caller has it."""
    group = (queue_owners(tenants) if owners is None else owners).get(queue) if queue is not None else None
    if group is not None:
        return group
    if queue is None or queue in tenants.queues:
        return "admin"
    return f"queue:{queue}"


def queue_owners(tenants: Tenants) -> dict[str, str]:
    """Each owned queue's group, ``tenant:<names>``: the tenants whose tokens can submit to it,
    joined with every tenant that shares a queue with one of them (connected components of the
    tokens linked by shared queues), so that all a tenant can write to is one group."""
    parent = {token.name: token.name for token in tenants.tokens}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    first: dict[str, str] = {}
    for token in tenants.tokens:
        for queue in token.queues:
            other = first.setdefault(queue, token.name)
            parent[root(token.name)] = root(other)
    members: dict[str, list[str]] = {}
    for name in parent:
        members.setdefault(root(name), []).append(name)
    return {queue: "tenant:" + ",".join(sorted(members[root(name)])) for queue, name in first.items()}


def fit_runs(runs: Sequence[Measurement], catalog: Catalog, tenants: Tenants | None = None) -> ContentionLearner:
    """The learner fitted to ``runs``: all pooled without a tenants file, or when every run is one
    :func:`tenant_group`'s; else one fit per group, combined per model by the median over the
    groups with evidence (scale: groups with uncontended runs of the model; exponent: groups with
    contended runs) and bounded by :data:`TENANT_FIT_BOUND`, so that one tenant's reports cannot
    move another's predictions beyond that (see the module doc)."""
    learner = ContentionLearner()
    groups: dict[str, list[Measurement]] = {}
    if tenants is not None:
        owners = queue_owners(tenants)
        for run in runs:
            groups.setdefault(tenant_group(run.queue, tenants, owners), []).append(run)
    if len(groups) <= 1:
        learner.fit_all(observations(runs, catalog))
        return learner
    per_model: dict[str, list[ModelFit]] = {}
    for group in sorted(groups):
        apart = ContentionLearner()
        apart.fit_all(observations(groups[group], catalog))
        for model, fit in apart.fits.items():
            per_model.setdefault(model, []).append(fit)
    bound = math.log(TENANT_FIT_BOUND)
    combined = {}
    for model, fits in per_model.items():
        scaled = [f.log_scale for f in fits if f.observations > f.contended]  # uncontended runs set the scale
        shaped = [f.exponent for f in fits if f.contended > 0]  # contended runs set the exponent
        log_scale = statistics.median(scaled) if scaled else 0.0
        exponent = statistics.median(shaped) if shaped else 1.0
        combined[model] = ModelFit(min(max(log_scale, -bound), bound),
                                   min(max(exponent, 1 / TENANT_FIT_BOUND), TENANT_FIT_BOUND),
                                   sum(f.observations for f in fits), sum(f.contended for f in fits))
    return ContentionLearner(fits=combined)


def _number(path: Path) -> int:
    """The version a version file is named after."""
    found = _VERSION_FILE.match(path.name)
    assert found is not None
    return int(found.group(1))


def versions(folder: Path) -> list[Path]:
    """The version files in ``folder``, oldest first (a name past :data:`MAX_VERSION` is no version's)."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if (m := _VERSION_FILE.match(p.name)) and int(m.group(1)) <= MAX_VERSION]
    return [p for _, p in sorted(found)]


def read_version(path: Path) -> dict[str, object]:
    """A version file's document (its fits checked); :class:`DeepShareError` naming the file."""
    text = read_input_text(path, "contention fit", CONFIG_BYTES)  # a FIFO or device is refused, not waited on
    doc = load_json(text, str(path), "a contention fit")
    try:
        fits_of(doc)
        version = doc["version"]  # type: ignore[index]
        if type(version) is not int or not 0 <= version <= MAX_VERSION:  # 1e999 failed the start; 1e300 every refit
            raise ValueError(f"version: expected a whole number from 0 to {MAX_VERSION}, got {str(version)[:40]}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:  # OverflowError: float(10**400)
        raise DeepShareError(f"{path}: not a contention fit ({exc})") from None
    return doc


def fits_of(doc: Mapping[str, object]) -> dict[str, ModelFit]:
    """The :class:`ModelFit` of every model of a version document; ValueError for a parameter that
    is not a finite number (a NaN an older version wrote) or outside what a fit gives: a scale from
    :data:`MIN_RATIO` to :data:`MAX_RATIO`, an exponent from :data:`MIN_EXPONENT` to
    :data:`MAX_EXPONENT` (an exponent of 1e308 made every contended ratio 0, which a learned ratio
    never is), report counts of 0 or more."""
    fits = {}
    for name, f in doc["models"].items():  # type: ignore[union-attr]
        scale, exponent = float(f["scale"]), float(f["exponent"])
        observations_, contended = float(f["observations"]), float(f["contended"])
        if not all(math.isfinite(v) for v in (scale, exponent, observations_, contended)):
            raise ValueError(f"model {str(name)[:64]!r}: parameters must be finite numbers")
        if not (MIN_RATIO <= scale <= MAX_RATIO and MIN_EXPONENT <= exponent <= MAX_EXPONENT
                and 0 <= contended <= observations_):
            raise ValueError(f"model {str(name)[:64]!r}: expected a scale from {MIN_RATIO:g} to {MAX_RATIO:g}, an "
                             f"exponent from {MIN_EXPONENT:g} to {MAX_EXPONENT:g} and 0 <= contended <= observations, "
                             f"got {scale:g}, {exponent:g}, {contended:g} and {observations_:g}")
        fits[name] = ModelFit(math.log(scale), exponent, observations_, contended)
    return fits


@dataclass
class LiveLearning:
    """The live scheduler's learned contention model and its versions in ``state_dir``."""

    state_dir: Path
    prior: ContentionModel
    catalog: Catalog
    refit_s: float = DEFAULT_REFIT_S
    runs: int = REFIT_RUNS
    tenants: Callable[[], Tenants | None] = lambda: None
    """The tenants file in force at a refit (None: started without ``--tenants``): under one, runs
    are fitted by tenant (:func:`fit_runs`)."""

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        self.folder = self.state_dir / CONTENTION_DIR
        self.learner = ContentionLearner()
        self.latest: dict[str, object] | None = None
        """The latest version's document (None before the first fit)."""
        self._last_refit: float | None = None
        found = versions(self.folder)
        self._highest = _number(found[-1]) if found else 0
        """The highest version a file is named after: the next fit is written after it, never over
        an existing file, even when the newest files are damaged."""
        for path in reversed(found):  # the newest readable version; a damaged one is passed over
            try:
                self.latest = read_version(path)
                self.learner = ContentionLearner(fits=fits_of(self.latest))
                break
            except DeepShareError as exc:
                log.warning("%s; passed over", exc)
        if found and self.latest is None:
            log.warning("no readable contention fit in %s; starting from the prior", self.folder)

    def document(self) -> dict[str, object]:
        """What ``GET /v1/contention`` answers: the latest version (version 0, no models, before
        the first fit) and the refit period."""
        doc = dict(self.latest) if self.latest is not None else {
            "version": 0, "fitted_at": None, "prior": self.prior.name, "runs": 0, "mae_prior": None,
            "mae_learned": None, "models": {}}
        doc["refit_s"] = self.refit_s
        return doc

    @property
    def version(self) -> int:
        return 0 if self.latest is None else int(self.latest["version"])  # type: ignore[arg-type]

    def due(self, now: float) -> bool:
        return self._last_refit is None or now - self._last_refit >= self.refit_s

    def refit(self, journal: Journal) -> dict[str, object]:
        """Refit from ``journal``; write a new version when a fit changed. The current document."""
        self._last_refit = journal.now()
        learner, doc = fit_from_journal(journal, self.catalog, self.prior.name, max(self.version, self._highest) + 1,
                                        self.runs, self.tenants())
        self.learner = learner
        if (self.latest or {}).get("models", {}) == doc["models"]:  # nothing new: no new version
            return self.latest or self.document()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"params-{int(doc['version']):05d}.json"  # type: ignore[call-overload]
        try:
            text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
        except ValueError:  # never written: every reader of the folder would then start from it
            raise DeepShareError(f"contention fit v{doc['version']} has a non-finite number; not written") from None
        write_text_atomic(path, text, "contention fit")
        self.latest = doc
        self._highest = int(doc["version"])  # type: ignore[call-overload]
        log.info("contention fit v%d from %d run(s): ratio MAE %s (prior %s)", doc["version"], doc["runs"],
                 _fmt(doc["mae_learned"]), _fmt(doc["mae_prior"]))
        return doc

    def prior_state(self, topology: Topology, running: Iterable[tuple[str, str, int, Placement]]) -> ContentionState:
        """The shipped model's state of the running jobs ``(id, model, GPUs, placement)``."""
        state = self.prior.new_state(topology, self.catalog)
        for job_id, model, gpus, placement in running:
            state.add(RunningJob(job_id, model, gpus, placement))
        return state

    def model(self, topology: Topology, running: Sequence[tuple[str, str, int, Placement]],
              link_load: Mapping[str, float]) -> LearnedContention:
        """The learned model for a view of ``running``, over the measured load they do not explain."""
        background: dict[str, float] = {}
        if link_load:
            loads = getattr(self.prior_state(topology, running), "link_loads", None)
            if loads is not None:
                expected = loads()
                background = {name: load - expected.get(name, 0.0) for name, load in link_load.items()
                              if load - expected.get(name, 0.0) > 0}
        return LearnedContention(self.prior, self.learner, background)

    def predicted_throughput(self, model: str, placement: Placement, prior_ratio: float) -> float:
        """The learned prediction for a job of ``model`` at ``placement`` where the shipped model
        predicts ``prior_ratio``: isolated throughput x learned scale x learned ratio."""
        isolated = self.catalog.throughput(model, placement.total_gpus, placement.num_nodes)
        return self.learner.throughput(model, isolated, prior_ratio)


def _fmt(value: object) -> str:
    return "-" if value is None else f"{value:.4f}"
