"""Fairness-aware job orders, registered like every other (``drf+packed``, ``themis+packed+preempt``).

They read the view's ``tenancy`` (queues, weights, priorities): the tenants file under
``--tenants`` (:class:`~deepshare.tenants.wrapper.Admitted` puts it there), else every job's own
``queue`` (or ``default``) with weight 1.

* ``drf`` — the queue with the least weighted dominant share first, by progressive filling:
  each queue's running jobs, then its queued ones (higher priority class, then older, first),
  are counted up in turn, and a job's key is its queue's GPUs up to and including it over the
  cluster's GPUs and the queue's weight (GPUs are the only resource, so the dominant share is
  the GPU share). One sort then interleaves the queues as DRF's one-at-a-time filling would.
* ``themis`` — the job with the largest current finish-time fairness estimate first:
  ``rho = (time since submission + remaining) / (isolated run time x max(1, gpus / fair GPUs))``
  where ``remaining`` and the isolated run time (time run + remaining) are what the view's
  information model lets a scheduler know, and the fair GPUs are the cluster's GPUs times the
  queue's weight over the active queues' (those with a job running or queued) total weight.
  A job that has waited long against what it would take alone on its share goes first.
"""

from __future__ import annotations

import math
from collections import defaultdict

from deepshare.core.view import ClusterView, JobView


def drf(view: ClusterView):  # type: ignore[no-untyped-def]
    tenancy = view.tenancy
    total = max(view.total_gpus, 1)
    by_queue: dict[str, list[JobView]] = defaultdict(list)
    for job in view.running:
        by_queue[tenancy.queue_of(job)].append(job)
    queued: dict[str, list[JobView]] = defaultdict(list)
    for job in view.queued:
        queued[tenancy.queue_of(job)].append(job)
    keys: dict[str, float] = {}
    for name in {*by_queue, *queued}:
        scale = total * tenancy.weight_of(name)
        filled = 0
        running = sorted(by_queue.get(name, ()), key=lambda j: (-tenancy.priority_of(j), j.submit_time, j.job_id))
        waiting = sorted(queued.get(name, ()), key=lambda j: (-tenancy.priority_of(j), j.submit_time, j.job_id))
        for job in (*running, *waiting):
            filled += job.gpus
            keys[job.job_id] = filled / scale

    def key(job: JobView) -> tuple:
        return (keys.get(job.job_id, 0.0), job.submit_time, job.job_id)

    return key


def themis(view: ClusterView):  # type: ignore[no-untyped-def]
    tenancy = view.tenancy
    now = view.now
    active = {tenancy.queue_of(job) for job in (*view.running, *view.queued)}
    # fsum: exactly rounded, so independent of the set's order (PYTHONHASHSEED); a plain sum
    # of 0.7, 0.2 and 0.1 is 1.0 in one order and 0.9999999999999999 in another
    weights = math.fsum(tenancy.weight_of(q) for q in active) or 1.0
    total = view.total_gpus

    def key(job: JobView) -> tuple:
        fair = total * tenancy.weight_of(tenancy.queue_of(job)) / weights
        alone = (job.ran_s + job.remaining_s) * max(1.0, job.gpus / fair if fair > 0 else float("inf"))
        rho = (now - job.submit_time + job.remaining_s) / alone if alone > 0 else 0.0
        return (-rho, job.submit_time, job.job_id)

    return key


FAIRNESS_ORDERS = {
    "drf": (drf, "the queue with the least weighted GPU share first, by progressive filling (DRF; --tenants weights)"),
    "themis": (themis, "the job with the largest estimated finish-time fairness rho first (Themis; --tenants weights)"),
}
"""Name -> (order factory, description), merged into the registry's orders."""
