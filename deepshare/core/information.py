"""What a policy may know of a job's length: the run's *information model*.

The simulator knows every job's true remaining work; no live cluster does. A run's
:class:`InformationModel` says what its views carry instead (``durations``):

``exact``
    ``JobView.remaining_s`` is the true remaining work (seconds at the job's reference
    throughput). The artifact's setting and the upper reference: no live cluster has it.
``estimated``
    Each job has an *estimate* of its isolated run time: the trace's own ``requested_s`` (a time
    limit or a user's estimate) where it has one, otherwise one drawn per job from the error
    model below. ``remaining_s`` is what a scheduler would believe, ``max(estimate - ran,
    ESTIMATE_FLOOR_S)`` with ``ran`` the seconds the job has held its GPUs (attained
    GPU-seconds / GPUs), never the true remaining work. What the placement service and the live
    scheduler give a policy from the estimates their clients send.
``unknown``
    No estimate at all (``JobView.estimate_s`` is None): ``remaining_s`` is the same flat prior
    for every job, ``max(UNKNOWN_PRIOR_S - ran, ESTIMATE_FLOOR_S)``, the live default for a job
    whose spec says nothing.

Attained service, waiting time, GPUs, model and the job's features (user, group, virtual cluster)
are visible in every mode, and so is the history of jobs that finished before now
(:mod:`deepshare.core.history`). Contention predictions are throughput ratios: they carry no
remaining work in any mode.

Contention (``contention_knowledge``, the model's second axis): what a view's ``predict`` and its
running jobs' ``ratio`` come from.

``exact``
    The simulation's own contention model: every contention-aware policy decides with perfect
    knowledge of contention (the artifact's setting).
``learned``
    A model the scheduler fits online from what a live cluster observes
    (:mod:`deepshare.core.contention.learned`): it starts from a prior (the shipped parameters;
    a model the catalog lacks gets its proxy's) and is refined from each running job's measured
    throughput, reported every ``report_s`` with lognormal noise ``measurement_noise``. Nothing
    of the simulation's own contention state reaches a view. Learning needs a world that differs
    from the prior to have anything to learn (``--perturb-contention``, ``--true-params``).

Error model (``estimated``, jobs without ``requested_s``): estimate = true isolated run time x
``exp(sigma * z)``, ``z`` standard normal, one draw per job in trace order from
``numpy.random.default_rng(seed)``: median-unbiased, and the same estimates for every policy run
on the trace. With ``sigma`` = 1 (:data:`DEFAULT_ESTIMATE_ERROR`), 8% of estimates fall within
±10% of the truth, 41% within ±50%, 76% within ±100% and 99% within 10x (:func:`within`): close
to the error the Helios (SC'21) artifact reports for its history-based predictor (10%, 50%, 70%
and 90%; its ``framework/QSSF Service/estimators/philly_estimate.py``), lighter in the 10x tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from deepshare.core import stable_math
from deepshare.core.bounds import MAX_DURATION_S, MIN_WORK_S
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec

DURATIONS = ("exact", "estimated", "unknown")
"""The information models, from the most to the least a policy knows."""
DEFAULT_DURATIONS = "estimated"
"""What every command runs under unless told: what the service and the live scheduler give a
policy. ``exact`` is for reproducing the artifact and for the upper reference."""
CONTENTION_KNOWLEDGE = ("exact", "learned")
"""What a policy knows of contention (see the module doc), from the most to the least."""
DEFAULT_CONTENTION_KNOWLEDGE = "exact"
"""Every command's default: the artifact's setting, bit for bit what runs before the learned
model existed gave; ``learned`` is what a live cluster has."""
DEFAULT_REPORT_S = 60.0
"""Seconds between two throughput reports of a running job (a live worker's report period)."""
DEFAULT_MEASUREMENT_NOISE = 0.05
"""Lognormal sigma of a reported throughput around the job's true rate (step-time jitter)."""
DEFAULT_ESTIMATE_ERROR = 1.0
"""Lognormal sigma of a drawn estimate (see the module doc)."""
MAX_ESTIMATE_ERROR = 5.0
ESTIMATE_FLOOR_S = 60.0
"""A job that has run past its estimate is believed to have this long left."""
UNKNOWN_PRIOR_S = 3600.0
"""The run time assumed for a job nothing estimates (the live scheduler's and the placement
service's default)."""


def believed_remaining_s(estimate_s: float | None, ran_s: float) -> float:
    """What a scheduler believes is left of a job: its estimate (``UNKNOWN_PRIOR_S`` without
    one) minus the seconds it has run, never below ``ESTIMATE_FLOOR_S``. The one rule the
    simulator, the placement service and the live scheduler share."""
    left = (UNKNOWN_PRIOR_S if estimate_s is None else estimate_s) - ran_s
    return left if left > ESTIMATE_FLOOR_S else ESTIMATE_FLOOR_S


def estimate_of(job: JobSpec, true_duration_s: float, factor: float) -> float:
    """A job's estimate: its own ``requested_s``, else its true run time x its drawn error, at
    most :data:`~deepshare.core.bounds.MAX_DURATION_S` (a year: the domain every boundary
    enforces, which a wide error drawn on a long job can pass) and at least
    :data:`~deepshare.core.bounds.MIN_WORK_S` (a product that underflowed to 0 s aborted the run
    at the job's completion: a finished job's estimate must be positive)."""
    if job.requested_s is not None:
        return job.requested_s
    estimate = true_duration_s * factor
    if estimate >= MAX_DURATION_S:
        return MAX_DURATION_S
    return estimate if estimate >= MIN_WORK_S else MIN_WORK_S


@dataclass(frozen=True)
class InformationModel:
    """What the run's views carry of job lengths (see the module doc)."""

    durations: str = "exact"
    """``exact``, ``estimated`` or ``unknown``. The library's default is ``exact`` so that a
    simulator built by hand keeps the artifact's semantics; every command defaults to
    :data:`DEFAULT_DURATIONS`."""
    estimate_error: float = DEFAULT_ESTIMATE_ERROR
    """Lognormal sigma of the estimates drawn for jobs without ``requested_s``."""
    estimate_seed: int = 0
    """Seed of those draws (trace order); the simulated throughput reports' noise is drawn from
    another stream of the same seed (``default_rng([estimate_seed, 1])``)."""
    contention_knowledge: str = DEFAULT_CONTENTION_KNOWLEDGE
    """``exact`` or ``learned``: where predictions and running ratios come from."""
    report_s: float = DEFAULT_REPORT_S
    """Under ``learned``: seconds between two throughput reports of a running job."""
    measurement_noise: float = DEFAULT_MEASUREMENT_NOISE
    """Under ``learned``: lognormal sigma of a reported throughput."""

    def __post_init__(self) -> None:
        if self.durations not in DURATIONS:
            raise DeepShareError(f"durations must be one of {', '.join(DURATIONS)}, got {self.durations!r}")
        e = self.estimate_error
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 <= e <= MAX_ESTIMATE_ERROR:
            raise DeepShareError(f"estimate_error must be a number from 0 to {MAX_ESTIMATE_ERROR:g} (a lognormal sigma), got {e!r}")
        s = self.estimate_seed
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise DeepShareError(f"estimate_seed must be a non-negative integer, got {s!r}")
        if self.contention_knowledge not in CONTENTION_KNOWLEDGE:
            raise DeepShareError(f"contention_knowledge must be one of {', '.join(CONTENTION_KNOWLEDGE)}, "
                                 f"got {self.contention_knowledge!r}")
        r = self.report_s
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 1 <= r <= 1e6:
            raise DeepShareError(f"report_s must be a number of seconds from 1 to 1,000,000, got {r!r}")
        n = self.measurement_noise
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 <= n <= 1:
            raise DeepShareError(f"measurement_noise must be a number from 0 to 1 (a lognormal sigma), got {n!r}")

    @property
    def exact(self) -> bool:
        """Whether views carry the true remaining work (``durations`` exact)."""
        return self.durations == "exact"

    @property
    def learns_contention(self) -> bool:
        """Whether predictions come from a learned contention model, not the simulation's own."""
        return self.contention_knowledge == "learned"

    def error_factors(self, n: int) -> np.ndarray | None:
        """The drawn error of each of ``n`` jobs' estimates, in trace order (one draw per job,
        whether or not it has ``requested_s``, so a limit on one job leaves every other job's
        estimate as it was); None under ``unknown``, where nothing is estimated."""
        if self.durations == "unknown":
            return None
        if self.estimate_error == 0:
            return np.ones(n)
        return stable_math.exp(self.estimate_error * np.random.default_rng(self.estimate_seed).standard_normal(n))

    def estimates(self, jobs: Sequence[JobSpec], true_durations: Sequence[float]) -> list[float | None]:
        """Each job's visible estimate of its isolated run time, in trace order: its
        ``requested_s``, else its true run time x its drawn error; all None under ``unknown``."""
        factors = self.error_factors(len(jobs))
        if factors is None:
            return [None] * len(jobs)
        return [estimate_of(job, true, float(f)) for job, true, f in zip(jobs, true_durations, factors)]

    def describe(self) -> str:
        """One phrase for tables and logs: ``exact``, ``estimated (sigma 1)``, ``unknown``, with
        ``, contention learned`` appended when contention is learned."""
        text = f"estimated (sigma {self.estimate_error:g})" if self.durations == "estimated" else self.durations
        return text + (", contention learned" if self.learns_contention else "")


EXACT = InformationModel("exact")


def within(ratio_error: float, sigma: float) -> float:
    """Share of lognormal(sigma) estimates within ``±ratio_error`` of the truth (ratio in
    ``[1 - e, 1 + e]``, the lower end floored at 0); for the docs' figures and their test."""
    if sigma == 0:
        return 1.0
    hi = math.log1p(ratio_error)
    lo = math.log(1 - ratio_error) if ratio_error < 1 else -math.inf
    phi = lambda x: 0.5 * (1 + math.erf(x / (sigma * math.sqrt(2))))  # noqa: E731
    return phi(hi) - (0.0 if lo == -math.inf else phi(lo))
