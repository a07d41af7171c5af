"""A job's remaining run time as a belief: what its estimate, the history and the time it has run
say together.

Under the ``estimated`` and ``unknown`` information models a view gives, for each job, an estimate
of its run time (or none), the history of finished jobs (their run times, features and the
estimates they came with) and the time the job has run. Each is evidence about the job's log run
time ``L = log D``:

* the estimate: ``L ~ N(log estimate + bias, spread^2)``, with the bias and spread of
  log(run / estimate) measured on the history's finished jobs (:meth:`JobHistory.estimate_error`)
  once :data:`MIN_CALIBRATION` of them had an estimate, else unbiased with spread
  :data:`~deepshare.core.information.DEFAULT_ESTIMATE_ERROR`;
* the history's forecast for the job's group, user or size (:meth:`JobHistory.forecast`):
  ``L ~ N(log forecast, s^2 (1 + 1/n))``, with ``s`` the spread of run times within the keys of
  that level pooled over the history (:meth:`JobHistory.level_spread`: how alike a group's runs,
  or a user's jobs, have been on this cluster), or :data:`PRIOR_SPREAD` before any key of the
  level had two jobs;
* neither: the flat prior ``N(log UNKNOWN_PRIOR_S, PRIOR_SPREAD^2)``.

Every term is kept inside the documented domain of run times
(:data:`~deepshare.core.bounds.MAX_DURATION_S`): a log run time between ``log MIN_BELIEF_S`` and
``log MAX_DURATION_S`` and a spread between :data:`MIN_SPREAD` and :data:`MAX_SPREAD`, so the
belief is total however wide a group's history is (run times from a millisecond to a year in one
group give a spread far past anything the lognormal tail maths survives): no overflow, no NaN,
no infinite answer.

The two are combined by their precisions (a normal prior times a normal likelihood), and the
result is conditioned on the job having run ``ran`` seconds already: the expected remaining run
time is ``E[D | D > ran] - ran`` for the lognormal belief. Under ``exact`` the view's own
``remaining_s`` (the truth) is used instead.

:func:`expected_remaining_s` is the one rule; the ``bsrsf`` order (least expected remaining
GPU-service) and the learned policies' ``belief_left_h`` column read it.
"""

from __future__ import annotations

import math
from typing import Callable

from deepshare.core.bounds import MAX_DURATION_S, clamp
from deepshare.core.history import JobHistory
from deepshare.core.information import DEFAULT_ESTIMATE_ERROR, ESTIMATE_FLOOR_S, UNKNOWN_PRIOR_S
from deepshare.core.view import ClusterView, JobView

MIN_CALIBRATION = 10
"""Finished jobs with estimates the history needs before its bias and spread replace the defaults."""
PRIOR_SPREAD = 1.0
"""Log-spread of a run time nothing but the population says anything about."""
MIN_SPREAD = 0.05
"""The least log-spread any evidence is given (no evidence is exact)."""
MAX_SPREAD = 6.0
"""The most log-spread any evidence is given: a factor of 400 either way per sigma (past the
information model's widest estimate error, 5) already says "nothing"; wider spreads (a group of
one-millisecond and one-year runs) would only overflow."""
MIN_BELIEF_S = 1e-3
"""The shortest run time a belief centres on (a millisecond)."""
_LOG_MIN, _LOG_MAX = math.log(MIN_BELIEF_S), math.log(MAX_DURATION_S)
_SQRT2 = math.sqrt(2.0)
_LOG_PRIOR = math.log(UNKNOWN_PRIOR_S)


def _log_cdf(x: float) -> float:
    """log Phi(x), the standard normal CDF, accurate far into the lower tail."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2 * math.pi)  # Mills' ratio, first order


def remaining_given_ran(mu: float, sigma: float, ran_s: float) -> float:
    """``E[D | D > ran] - ran`` for ``log D ~ N(mu, sigma^2)``, from :data:`ESTIMATE_FLOOR_S` to
    :data:`~deepshare.core.bounds.MAX_DURATION_S` (a belief never says more than a year is left)."""
    if ran_s <= 0.0:
        log_mean = mu + 0.5 * sigma * sigma
        left = math.exp(log_mean) if log_mean < _LOG_MAX else MAX_DURATION_S
    else:
        z = (mu - math.log(ran_s)) / sigma
        log_mean = mu + 0.5 * sigma * sigma + _log_cdf(z + sigma) - _log_cdf(z)
        left = math.exp(log_mean) - ran_s if log_mean < 700.0 else MAX_DURATION_S
    return ESTIMATE_FLOOR_S if not left > ESTIMATE_FLOOR_S else MAX_DURATION_S if left > MAX_DURATION_S else left


def belief(job: JobView, history: JobHistory, calibration: tuple[float, float] | None = None) -> tuple[float, float]:
    """``(mu, sigma)`` of the job's log run time from its estimate and the history's forecast
    (see the module doc). ``calibration``: the (bias, spread) of estimates, when already known."""
    terms: list[tuple[float, float]] = []
    if job.estimate_s is not None:
        bias, spread = calibration if calibration is not None else estimate_calibration(history)
        log_estimate = math.log(clamp(job.estimate_s, MIN_BELIEF_S, MAX_DURATION_S))
        terms.append((clamp(log_estimate + bias, _LOG_MIN, _LOG_MAX), clamp(spread, MIN_SPREAD, MAX_SPREAD)))
    forecast = history.forecast(job.gpus, job.user, job.group, job.vc)
    if forecast is not None:
        spread = history.level_spread(forecast.level)
        spread = PRIOR_SPREAD if spread is None else spread
        log_forecast = math.log(forecast.run_s) if forecast.run_s > 0 else _LOG_MIN
        terms.append((clamp(log_forecast, _LOG_MIN, _LOG_MAX),
                      clamp(spread * math.sqrt(1 + 1 / forecast.jobs), MIN_SPREAD, MAX_SPREAD)))
    if not terms:
        return _LOG_PRIOR, PRIOR_SPREAD
    precision = sum(1.0 / (s * s) for _, s in terms)
    mu = sum(m / (s * s) for m, s in terms) / precision
    return mu, math.sqrt(1.0 / precision)


def estimate_calibration(history: JobHistory) -> tuple[float, float]:
    """(bias, spread) of log(run / estimate) on the history, or the defaults before it has
    :data:`MIN_CALIBRATION` finished jobs that came with estimates."""
    error = history.estimate_error()
    if error.jobs < MIN_CALIBRATION:
        return 0.0, DEFAULT_ESTIMATE_ERROR
    return error.bias, max(MIN_SPREAD, error.spread)


def expected_remaining_s(job: JobView, history: JobHistory, durations: str = "estimated",
                         calibration: tuple[float, float] | None = None) -> float:
    """The job's expected remaining isolated run time (see the module doc); the view's own
    ``remaining_s`` under ``exact``."""
    if durations == "exact":
        return job.remaining_s
    mu, sigma = belief(job, history, calibration)
    return remaining_given_ran(mu, sigma, job.ran_s)


def remaining_belief(view: ClusterView) -> Callable[[JobView], float]:
    """``expected_remaining_s`` for the jobs of one decision, its per-shape answers remembered
    until the history grows (jobs of one group, user and size that have not run share one)."""
    history, durations = view.history, view.durations
    if durations == "exact":
        return lambda job: job.remaining_s
    memo = history.memo()
    calibration = memo.get("estimate-calibration")
    if calibration is None:
        calibration = memo["estimate-calibration"] = estimate_calibration(history)

    def left(job: JobView) -> float:
        key = ("belief", job.gpus, job.user, job.group, job.vc, job.estimate_s)
        found = memo.get(key)
        if found is None:
            found = memo[key] = belief(job, history, calibration)
        return remaining_given_ran(found[0], found[1], job.ran_s)

    return left
