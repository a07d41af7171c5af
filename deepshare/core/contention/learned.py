"""A contention model the scheduler learns online: a prior corrected by measured throughputs.

Why: in the simulator, ``exact`` knowledge asks the very model that runs the simulation; a live
cluster has the shipped parameters for a handful of models and measurements for the rest. The
learned model starts from a *prior* (any :class:`ContentionModel` with shipped parameters: the
``profiled`` table or the ``link`` physics; a model the catalog lacks gets its proxy's) and
corrects it per model name from what running jobs report.

The correction, per model ``m`` (two numbers, fitted in closed form), with ``x = ln(prior
ratio)`` and ``y = ln(measured throughput / the catalog's isolated throughput)``::

    y = a_m              (reports where the prior predicts no contention, x = 0)
    y = a_m + theta_m x  (contended reports, x < 0)

``a_m`` (the log *scale*) corrects the isolated throughput (a model the catalog lacks runs at its
proxy's speed there); it does not enter ratios, only predicted throughputs, and only uncontended
reports fit it. ``theta_m`` (the *exponent*) says how much more (> 1) or less (< 1) sensitive to
contention the model is than the prior thinks: the learned ratio is ``prior ratio ** theta_m``,
which stays in (0, 1] and is exactly 1 where the prior predicts no contention. It is fitted
through the origin on the contended reports with ``a_m`` taken out: a free intercept there let
model-form error leak into ``a`` (on a perturbed ``link`` world the ratio error after the first
10% of jobs was 0.038 with one, 0.009 without, against the prior's 0.049). Both are ridge-
regularised toward the prior (``a = 0``, ``theta = 1``) with weights :data:`SCALE_PRIOR_WEIGHT` and
:data:`EXPONENT_PRIOR_WEIGHT`: the first reports move the fit, a handful of contended ones settle it.

Per model, closed form::

    a     = sum_uncontended(y) / (n_uncontended + SCALE_PRIOR_WEIGHT)
    theta = (EXPONENT_PRIOR_WEIGHT + sum_contended(x (y - a))) / (EXPONENT_PRIOR_WEIGHT + sum_contended(x^2))

Observations must be finite with a positive weight: :meth:`ContentionLearner.observe` refuses
any other, :meth:`ContentionLearner.fit_all` (reports read from a journal) skips them and counts
them in ``skipped``, and measured ratios are clamped to ``[MIN_RATIO, MAX_RATIO]``, so no fit
ever holds a non-finite number whatever a job reported.

Sufficient statistics are kept per model, so an observation costs O(1) and ``n`` reports of one
constant rate can be added at once (the simulator's reports between two events).
:meth:`ContentionLearner.fit_all` refits from raw observations instead (the live scheduler, from
its journal).

:class:`LearnedContention` is the :class:`ContentionModel` a view's ``predict`` and running ratios
come from under ``--contention-knowledge learned``: a prior state that tracks the running jobs,
with every ratio it answers corrected. Measured link load that the running jobs do not explain
(``background``, by link name) is passed to a ``link`` prior, whose physics counts it as traffic of
work the scheduler does not manage; the ``profiled`` table has no links and ignores it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from deepshare.core.contention.base import ContentionModel, ContentionState, RunningJob
from deepshare.core.errors import DeepShareError
from deepshare.core.topology import Topology
from deepshare.core.view import Prediction
from deepshare.core.workloads import Catalog

SCALE_PRIOR_WEIGHT = 1.0
"""Ridge weight pulling ``a`` toward 0 (no isolated-throughput error), in observations."""
EXPONENT_PRIOR_WEIGHT = 0.25
"""Ridge weight pulling ``theta`` toward 1 (the prior is right), in units of ``x^2``: two reports
at a prior ratio of 0.7 (``ln(0.7) ** 2 = 0.127``) weigh about as much as the prior."""
MIN_EXPONENT, MAX_EXPONENT = 0.05, 20.0
"""The fitted exponent is kept in this range (a ratio of 0.9 becomes 0.995 .. 0.12)."""
MIN_RATIO = 1e-6
"""Ratios below this are taken as this before a logarithm (a job reporting no progress)."""
MAX_RATIO = 1e6
"""Measured ratios above this are taken as this (a model a million times faster than the
catalog's proxy is a unit error): with :data:`MIN_RATIO` it keeps every fitted number finite."""


@dataclass(frozen=True, slots=True)
class ModelFit:
    """One model's correction of the prior (see the module doc)."""

    log_scale: float = 0.0
    """``a``: ln(true isolated throughput / the catalog's)."""
    exponent: float = 1.0
    """``theta``: learned ratio = prior ratio ** theta."""
    observations: float = 0.0
    """Reports behind the fit (0: the prior alone)."""
    contended: float = 0.0
    """Those whose prior ratio was below 1 (the ones that inform ``theta``)."""

    @property
    def scale(self) -> float:
        return math.exp(self.log_scale)


PRIOR = ModelFit()


@dataclass(frozen=True, slots=True)
class Observation:
    """One report: a job of ``model`` measured at ``measured_ratio`` of its catalog isolated
    throughput where the prior predicted ``prior_ratio``."""

    model: str
    prior_ratio: float
    measured_ratio: float
    weight: float = 1.0


class ContentionLearner:
    """Per model name: the sufficient statistics of its reports and the fit they give."""

    def __init__(self, scale_weight: float = SCALE_PRIOR_WEIGHT, exponent_weight: float = EXPONENT_PRIOR_WEIGHT,
                 fits: Mapping[str, ModelFit] | None = None) -> None:
        if not scale_weight > 0 or not exponent_weight > 0:
            raise DeepShareError("the learner's prior weights must be positive")
        self.scale_weight = scale_weight
        self.exponent_weight = exponent_weight
        self._stats: dict[str, list[float]] = {}  # model -> [n_u, sum_y_u, n_c, sum_x_c, sum_xx_c, sum_xy_c]
        self._fits: dict[str, ModelFit] = dict(fits or {})
        self._exponent: dict[str, float] = {m: f.exponent for m, f in self._fits.items() if f.exponent != 1.0}
        self.version = 0
        """Bumped whenever a fit changes (a cache key for predictions)."""
        self.skipped = 0
        """Observations :meth:`fit_all` skipped last time (not finite, or a weight not positive)."""

    # -- reading -------------------------------------------------------------------------------
    def fit(self, model: str) -> ModelFit:
        return self._fits.get(model, PRIOR)

    @property
    def fits(self) -> dict[str, ModelFit]:
        """Every model that has a fit other than the prior's, by name (sorted)."""
        return {m: self._fits[m] for m in sorted(self._fits)}

    def correct(self, model: str, prior_ratio: float) -> float:
        """The learned ratio of a job of ``model`` whose prior ratio is ``prior_ratio``."""
        theta = self._exponent.get(model)
        if theta is None or prior_ratio >= 1.0:
            return prior_ratio
        return max(prior_ratio, MIN_RATIO) ** theta

    def throughput(self, model: str, isolated: float, prior_ratio: float) -> float:
        """Predicted throughput: the catalog's isolated throughput x scale x learned ratio."""
        return isolated * self.fit(model).scale * self.correct(model, prior_ratio)

    # -- learning ------------------------------------------------------------------------------
    def observe(self, model: str, prior_ratio: float, measured_ratio: float, weight: float = 1.0) -> None:
        """Add one report (``weight`` > 0 counts it as that many) and refit ``model``;
        :class:`DeepShareError` for a report that is not finite."""
        if not _usable(prior_ratio, measured_ratio, weight):
            raise DeepShareError(f"model {model}: a report needs finite ratios and a positive weight, got "
                                 f"prior {prior_ratio!r}, measured {measured_ratio!r}, weight {weight!r}")
        self.observe_sums(model, weight, _log_prior(prior_ratio), weight * _log_measured(measured_ratio))

    def observe_sums(self, model: str, count: float, x: float, sum_y: float) -> None:
        """Add ``count`` reports taken at one prior log-ratio ``x`` whose log measured ratios sum
        to ``sum_y`` (``count`` reports of one constant rate with independent noise), and refit."""
        if count > 0:
            if not (math.isfinite(count) and math.isfinite(x) and math.isfinite(sum_y)):
                raise DeepShareError(f"model {model}: reports must be finite, got count {count!r}, x {x!r}, sum {sum_y!r}")
            self.add_sums(model, count, x, sum_y)
            self._refit(model)

    def add_sums(self, model: str, count: float, x: float, sum_y: float) -> None:
        """:meth:`observe_sums` without the refit: call :meth:`refit` once after a batch."""
        stats = self._stats.get(model)
        if stats is None:
            stats = self._stats[model] = [0.0] * 6
        _add(stats, count, x, sum_y)

    def refit(self, models: Iterable[str]) -> None:
        """Refit ``models`` from their reports so far."""
        for model in sorted(set(models)):
            if model in self._stats:
                self._refit(model)

    def fit_all(self, observations: Iterable[Observation]) -> None:
        """Forget every report and fit from ``observations`` alone (a refit from a journal)."""
        self._stats.clear()
        self._fits.clear()
        self._exponent.clear()
        touched = set()
        self.skipped = 0
        for obs in observations:
            if not _usable(obs.prior_ratio, obs.measured_ratio, obs.weight):
                self.skipped += 1
                continue
            x, y = _log_prior(obs.prior_ratio), _log_measured(obs.measured_ratio)
            _add(self._stats.setdefault(obs.model, [0.0] * 6), obs.weight, x, obs.weight * y)
            touched.add(obs.model)
        for model in sorted(touched):
            self._refit(model)
        self.version += 1

    def _refit(self, model: str) -> None:
        """The closed-form fit of the module doc."""
        n_u, sy_u, n_c, sx, sxx, sxy = self._stats[model]
        a = sy_u / (n_u + self.scale_weight)
        theta = (self.exponent_weight + sxy - a * sx) / (self.exponent_weight + sxx)
        if not (math.isfinite(a) and math.isfinite(theta)):  # sums past a float's range: keep the last fit
            return
        theta = min(max(theta, MIN_EXPONENT), MAX_EXPONENT)
        fit = ModelFit(a, theta, n_u + n_c, n_c)
        self._fits[model] = fit
        if theta != 1.0:
            self._exponent[model] = theta
        else:
            self._exponent.pop(model, None)
        self.version += 1


def _usable(prior_ratio: float, measured_ratio: float, weight: float) -> bool:
    """Whether a report can enter a fit: finite real ratios and a finite positive weight."""
    try:
        return (math.isfinite(prior_ratio) and math.isfinite(measured_ratio) and math.isfinite(weight)
                and weight > 0)
    except TypeError:
        return False


def _log_prior(prior_ratio: float) -> float:
    return math.log(max(min(prior_ratio, 1.0), MIN_RATIO))


def _log_measured(measured_ratio: float) -> float:
    return math.log(max(min(measured_ratio, MAX_RATIO), MIN_RATIO))


def _add(stats: list[float], count: float, x: float, sum_y: float) -> None:
    """``count`` reports at prior log-ratio ``x`` whose log measured ratios sum to ``sum_y``."""
    if x < 0.0:
        stats[2] += count
        stats[3] += count * x
        stats[4] += count * x * x
        stats[5] += x * sum_y
    else:
        stats[0] += count
        stats[1] += sum_y


def mean_abs_error(observations: Iterable[Observation], learner: ContentionLearner | None) -> float | None:
    """Mean |predicted ratio - measured ratio| over ``observations`` (weighted), predicted by
    ``learner`` (None: the prior's own ratio); None without observations."""
    total = weight = 0.0
    for obs in observations:
        predicted = obs.prior_ratio if learner is None else learner.correct(obs.model, obs.prior_ratio)
        total += obs.weight * abs(predicted - obs.measured_ratio)
        weight += obs.weight
    return None if weight == 0 else total / weight


@dataclass(frozen=True, eq=False)
class LearnedContention:
    """The prior corrected by ``learner``'s current fits (read at every answer, so a refit
    reaches the next prediction). ``background``: measured load by link name that no managed
    job explains, for a ``link`` prior (see the module doc)."""

    prior: ContentionModel
    learner: ContentionLearner
    background: Mapping[str, float] = field(default_factory=dict)
    name: str = "learned"

    def new_state(self, topology: Topology, catalog: Catalog) -> "LearnedState":
        state = self.prior.new_state(topology, catalog)
        if self.background and hasattr(state, "set_background"):
            state.set_background(dict(self.background))
        return LearnedState(state, self.learner)


class LearnedState:
    """A prior state tracking the running jobs, every ratio it answers corrected by the learner."""

    def __init__(self, prior: ContentionState, learner: ContentionLearner) -> None:
        self.prior = prior
        """The prior's own state (its ratios uncorrected: what the learner's ``x`` is)."""
        self._learner = learner
        self._model: dict[str, str] = {}
        isolated = getattr(prior, "isolated", None)
        if isolated is not None:  # a placement the prior calls isolated is 1.0 learned too (1 ** theta)
            self.isolated = isolated

    def add(self, job: RunningJob) -> set[str]:
        changed = self.prior.add(job)
        self._model[job.job_id] = job.model
        return changed

    def remove(self, job_id: str) -> set[str]:
        changed = self.prior.remove(job_id)
        del self._model[job_id]
        return changed

    def ratio(self, job_id: str) -> float:
        return self._learner.correct(self._model[job_id], self.prior.ratio(job_id))

    def prior_ratio(self, job_id: str) -> float:
        return self.prior.ratio(job_id)

    def predict(self, job: RunningJob) -> Prediction:
        raw = self.prior.predict(job)
        correct = self._learner.correct
        others: dict[str, float] = {}
        loss = 0.0
        for other, new in raw.others.items():
            model = self._model[other]
            old_ratio = correct(model, self.prior.ratio(other))
            new_ratio = correct(model, new)
            if new_ratio != old_ratio:
                others[other] = new_ratio
                loss += old_ratio - new_ratio
        return Prediction(correct(job.model, raw.ratio), others, loss)
