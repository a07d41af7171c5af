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
"""

from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import Callable

from deepshare.core.view import JobView

DLAS_THRESHOLDS_GPU_S = (3600.0, 36000.0)
STARVE_FACTOR = 2.0
STARVE_MIN_S = 3600.0

OrderKey = Callable[[JobView], tuple]
OrderFactory = Callable[[float], OrderKey]
"""``factory(now)`` -> the sort key at decision time ``now`` (C-speed attrgetters where possible)."""

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
def fifo(now: float) -> OrderKey:
    return _FIFO


@static_key
def srtf(now: float) -> OrderKey:
    return _SRTF


def _srsf_key(job: JobView) -> tuple:
    return (job.remaining_s * job.gpus, job.submit_time, job.job_id)


@static_key
def srsf(now: float) -> OrderKey:
    return _srsf_key


@static_key
def las(now: float) -> OrderKey:
    return _LAS


def dlas(now: float) -> OrderKey:
    def key(job: JobView) -> tuple:
        level = bisect_right(DLAS_THRESHOLDS_GPU_S, job.attained_gpu_s)
        if job.placement is not None:  # running jobs keep their place within their queue
            return (level, 0, job.submit_time, job.job_id)
        if job.attained_gpu_s > 0 and now - job.queued_since >= max(STARVE_MIN_S, STARVE_FACTOR * job.last_run_s):
            level = 0  # starvation guard
        return (level, 1, job.queued_since, job.job_id)

    return key


ORDERS: dict[str, tuple[OrderFactory, str]] = {
    "fifo": (fifo, "first come, first served"),
    "srtf": (srtf, "shortest remaining time first"),
    "srsf": (srsf, "shortest remaining GPU-service first (remaining time x GPUs, Tiresias's SRSF)"),
    "las": (las, "least attained GPU-service first (2D-LAS)"),
    "dlas": (dlas, "discretised 2D-LAS with a starvation guard (Tiresias)"),
}
