"""Job orders: which queued (or running) job deserves GPUs first. Smaller key = earlier.

* ``fifo`` — submission time.
* ``srtf`` — least remaining *time* (remaining work at the job's reference throughput).
* ``las`` — least attained GPU-service (GPU-seconds held so far), Tiresias's 2D-LAS.
* ``dlas`` — Tiresias's discretised 2D-LAS: attained service falls into queues at
  :data:`DLAS_THRESHOLDS_GPU_S`; FIFO (by time queued) within a queue; a job that has waited
  more than :data:`STARVE_FACTOR` x its last run (and at least :data:`STARVE_MIN_S`) is promoted
  to the first queue, the starvation guard.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from deepshare.core.types import JobView

DLAS_THRESHOLDS_GPU_S = (3600.0, 36000.0)
STARVE_FACTOR = 2.0
STARVE_MIN_S = 3600.0

OrderKey = Callable[[JobView, float], tuple]


def fifo(job: JobView, now: float) -> tuple:
    return (job.submit_time, job.job_id)


def srtf(job: JobView, now: float) -> tuple:
    return (job.remaining_s, job.submit_time, job.job_id)


def las(job: JobView, now: float) -> tuple:
    return (job.attained_gpu_s, job.submit_time, job.job_id)


def dlas(job: JobView, now: float) -> tuple:
    level = bisect_right(DLAS_THRESHOLDS_GPU_S, job.attained_gpu_s)
    if job.placement is None and job.attained_gpu_s > 0:
        waited = now - job.queued_since
        if waited >= max(STARVE_MIN_S, STARVE_FACTOR * job.last_run_s):
            level = 0
    if job.placement is not None:  # running jobs keep their place within their queue
        return (level, 0, job.submit_time, job.job_id)
    return (level, 1, job.queued_since, job.job_id)


ORDERS: dict[str, tuple[OrderKey, str]] = {
    "fifo": (fifo, "first come, first served"),
    "srtf": (srtf, "shortest remaining time first"),
    "las": (las, "least attained GPU-service first (2D-LAS)"),
    "dlas": (dlas, "discretised 2D-LAS with a starvation guard (Tiresias)"),
}
