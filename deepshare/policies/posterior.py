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
  ``L ~ N(log forecast, s^2 (1 + 1/n))``, its spread ``s`` shrunk towards :data:`PRIOR_SPREAD`
  by one pseudo-job (one run of a recurring group says little about the next run's spread);
* neither: the flat prior ``N(log UNKNOWN_PRIOR_S, PRIOR_SPREAD^2)``.

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

from deepshare.core.history import JobHistory
from deepshare.core.information import DEFAULT_ESTIMATE_ERROR, ESTIMATE_FLOOR_S, UNKNOWN_PRIOR_S
from deepshare.core.view import ClusterView, JobView

MIN_CALIBRATION = 10
"""Finished jobs with estimates the history needs before its bias and spread replace the defaults."""
PRIOR_SPREAD = 1.0
"""Log-spread of a run time nothing but the population says anything about."""
MIN_SPREAD = 0.05
"""The least log-spread any evidence is given (no evidence is exact)."""
_SQRT2 = math.sqrt(2.0)
_LOG_PRIOR = math.log(UNKNOWN_PRIOR_S)


def _log_cdf(x: float) -> float:
    """log Phi(x), the standard normal CDF, accurate far into the lower tail."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2 * math.pi)  # Mills' ratio, first order


def remaining_given_ran(mu: float, sigma: float, ran_s: float) -> float:
    """``E[D | D > ran] - ran`` for ``log D ~ N(mu, sigma^2)``, at least :data:`ESTIMATE_FLOOR_S`."""
    if ran_s <= 0.0:
        left = math.exp(mu + 0.5 * sigma * sigma)
    else:
        z = (mu - math.log(ran_s)) / sigma
        log_mean = mu + 0.5 * sigma * sigma + _log_cdf(z + sigma) - _log_cdf(z)
        left = math.exp(log_mean) - ran_s if log_mean < 700 else math.inf
    return left if left > ESTIMATE_FLOOR_S else ESTIMATE_FLOOR_S


def belief(job: JobView, history: JobHistory, calibration: tuple[float, float] | None = None) -> tuple[float, float]:
    """``(mu, sigma)`` of the job's log run time from its estimate and the history's forecast
    (see the module doc). ``calibration``: the (bias, spread) of estimates, when already known."""
    terms: list[tuple[float, float]] = []
    if job.estimate_s is not None:
        bias, spread = calibration if calibration is not None else estimate_calibration(history)
        terms.append((math.log(job.estimate_s) + bias, spread))
    forecast = history.forecast(job.gpus, job.user, job.group, job.vc)
    if forecast is not None:
        n = forecast.jobs
        shrunk = (n * forecast.spread ** 2 + PRIOR_SPREAD ** 2) / (n + 1)
        terms.append((math.log(forecast.run_s), max(MIN_SPREAD, math.sqrt(shrunk * (1 + 1 / n)))))
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
