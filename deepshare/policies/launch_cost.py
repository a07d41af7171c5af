"""What a launch costs in contention, in GPUs' worth of throughput: one unit for the placements
that weigh a job's own slowdown against its neighbours' (``topo-aware``, topology-aware
preemption), so that a large gang and a small neighbour are weighed by the GPUs they hold."""

from __future__ import annotations

from deepshare.core.view import ClusterView, JobView, Prediction
from deepshare.policies.place_types import Pending


def gpu_loss(job: JobView, prediction: Prediction, neighbour_gpus: float) -> float:
    """GPUs' worth of throughput lost if ``job`` launches where ``prediction`` was asked: its own
    slowdown x its GPUs, ``gpus x (1 - ratio)``, plus the neighbours' loss
    (:attr:`~deepshare.core.view.Prediction.others_loss`, in whole jobs) x ``neighbour_gpus``, a
    neighbour's GPU count (:func:`mean_job_gpus`). Exactly 0 for a launch predicted free of
    contention."""
    own = job.gpus * (1.0 - prediction.ratio)
    return own + prediction.others_loss * neighbour_gpus if prediction.others_loss else own


def mean_job_gpus(view: ClusterView, pending: Pending = (), default: float = 1.0) -> float:
    """The mean GPU count of the jobs holding GPUs (the running ones and this decision's launches),
    ``default`` when none does: the neighbours' weight in :func:`gpu_loss`. From the view's counts
    alone (GPUs in use over jobs running), never the running jobs' own views: building those for
    every contended placement cost a 100,000-job simulation on a fabric a third of its time."""
    count = len(view.running) + len(pending)
    if count == 0:
        return default
    used = view.total_gpus - sum(view.free) + sum(job.gpus for job, _ in pending)
    return max(used, 1) / count
