"""Job orders: which queued (or running) job deserves GPUs first. Smaller key = earlier.

* ``fifo`` — submission time.
* ``srtf`` — least remaining *time* (remaining work at the job's reference throughput).
* ``srsf`` — least remaining GPU-*service*: remaining time x GPUs (Tiresias's SRSF), so a short
  wide job does not jump ahead of narrow ones that would finish sooner per GPU held.
* ``las`` — least attained GPU-service (GPU-seconds held so far), Tiresias's 2D-LAS.
* ``dlas`` — Tiresias's discretised 2D-LAS: attained service falls into queues at
  :data:`DLAS_THRESHOLDS_GPU_S`; FIFO (by time queued) within a queue; a job that has waited
  more than :data:`STARVE_FACTOR` x its last run (and at least :data:`STARVE_MIN_S`) is promoted
  to the first queue, the starvation guard.
* ``gittins`` — Tiresias's 2D-Gittins: the highest Gittins index of the job's attained
  GPU-service under the distribution of finished jobs' GPU-service (:mod:`deepshare.policies.gittins`);
  LAS while nothing has finished.
* ``qssf`` — Helios' QSSF: least *predicted* remaining GPU-service, the prediction from finished
  jobs of the same recurring group, user, virtual cluster or GPU count
  (:meth:`~deepshare.core.history.JobHistory.forecast`); the job's estimate (or the flat prior)
  while nothing like it has finished.
* ``bsrsf`` — least *expected* remaining GPU-service under the belief its estimate, the history's
  forecast and the time it has run give together (:mod:`deepshare.policies.posterior`: the
  estimate debiased by the history's own record of estimates, weighed against the forecast by
  their spreads, conditioned on having run this long); SRSF itself under ``exact``.

``srtf`` and ``srsf`` read the view's ``remaining_s``, which is the truth only under the
``exact`` information model: under ``estimated`` they are SRTF / SRSF *on the job's estimate*
(its ``requested_s`` or drawn estimate, minus the time it has run), the naive thing operators do;
under ``unknown`` every job counts down from the same prior. ``fifo``, ``las``, ``dlas``,
``gittins`` and ``qssf`` never read ``remaining_s``.

An order is a factory: ``factory(view)`` gives the sort key for that decision (C-speed
attrgetters where possible). An order marked :func:`static_key` never reads the view (its key of a
queued job does not change while the job waits), so ``factory(None)`` works for it too.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import Callable

from deepshare.core.information import ESTIMATE_FLOOR_S, UNKNOWN_PRIOR_S
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.gittins import gittins_priority
from deepshare.policies.posterior import remaining_belief

DLAS_THRESHOLDS_GPU_S = (3600.0, 36000.0)
STARVE_FACTOR = 2.0
STARVE_MIN_S = 3600.0

OrderKey = Callable[[JobView], tuple]
OrderFactory = Callable[[ClusterView], OrderKey]
"""``factory(view)`` -> the sort key at that decision (see the module doc)."""

_FIFO = attrgetter("submit_time", "job_id")
_SRTF = attrgetter("remaining_s", "submit_time", "job_id")
_LAS = attrgetter("attained_gpu_s", "submit_time", "job_id")


def static_key(factory: OrderFactory) -> OrderFactory:
    """Mark an order whose key of a queued job does not change while the job waits."""
    factory.queued_key_is_static = True  # type: ignore[attr-defined]
    return factory


def is_static(factory: OrderFactory) -> bool:
    return getattr(factory, "queued_key_is_static", False)


@static_key
def fifo(view: ClusterView | None) -> OrderKey:
    return _FIFO


@static_key
def srtf(view: ClusterView | None) -> OrderKey:
    return _SRTF


def _srsf_key(job: JobView) -> tuple:
    return (job.remaining_s * job.gpus, job.submit_time, job.job_id)


@static_key
def srsf(view: ClusterView | None) -> OrderKey:
    return _srsf_key


@static_key
def las(view: ClusterView | None) -> OrderKey:
    return _LAS


def dlas(view: ClusterView) -> OrderKey:
    now = view.now

    def key(job: JobView) -> tuple:
        level = bisect_right(DLAS_THRESHOLDS_GPU_S, job.attained_gpu_s)
        if job.placement is not None:  # running jobs keep their place within their queue
            return (level, 0, job.submit_time, job.job_id)
        if job.attained_gpu_s > 0 and now - job.queued_since >= max(STARVE_MIN_S, STARVE_FACTOR * job.last_run_s):
            level = 0  # starvation guard
        return (level, 1, job.queued_since, job.job_id)

    return key


def gittins(view: ClusterView) -> OrderKey:
    priority = gittins_priority(view.history)

    def key(job: JobView) -> tuple:
        attained = job.attained_gpu_s
        return (-priority(attained), attained, job.submit_time, job.job_id)

    return key


_UNASKED = object()


def qssf(view: ClusterView) -> OrderKey:
    history = view.history
    memo = history.memo()

    def key(job: JobView) -> tuple:
        question = ("qssf", job.gpus, job.user, job.group, job.vc)
        run_s = memo.get(question, _UNASKED)
        if run_s is _UNASKED:
            forecast = history.forecast(job.gpus, job.user, job.group, job.vc)
            run_s = memo[question] = forecast.run_s if forecast is not None else None
        if run_s is None:  # nothing like it finished yet: its own estimate, if it has one
            run_s = job.estimate_s if job.estimate_s is not None else UNKNOWN_PRIOR_S
        left = run_s * job.gpus - job.attained_gpu_s
        floor = ESTIMATE_FLOOR_S * job.gpus
        return (left if left > floor else floor, job.submit_time, job.job_id)

    return key


def bsrsf(view: ClusterView) -> OrderKey:
    left = remaining_belief(view)

    def key(job: JobView) -> tuple:
        return (left(job) * job.gpus, job.submit_time, job.job_id)

    return key


ORDERS: dict[str, tuple[OrderFactory, str]] = {
    "fifo": (fifo, "first come, first served"),
    "srtf": (srtf, "shortest remaining time first"),
    "srsf": (srsf, "shortest remaining GPU-service first (remaining time x GPUs, Tiresias's SRSF)"),
    "las": (las, "least attained GPU-service first (2D-LAS)"),
    "dlas": (dlas, "discretised 2D-LAS with a starvation guard (Tiresias)"),
    "gittins": (gittins, "highest Gittins index of attained GPU-service over finished jobs' service (Tiresias's 2D-Gittins)"),
    "qssf": (qssf, "least predicted remaining GPU-service from finished jobs of the same group/user/size (Helios's QSSF)"),
    "bsrsf": (bsrsf, "least expected remaining GPU-service given the estimate, the history's forecast and the time run"),
}
