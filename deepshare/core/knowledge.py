"""What the simulator's scheduler knows of contention under ``--contention-knowledge learned``.

A live scheduler sees each running job's throughput as the job reports it and the node agents'
link loads; it never sees the contention model that "runs" the cluster. :class:`SimulatedKnowledge`
gives the simulator's views exactly that:

* a :class:`~deepshare.core.contention.learned.LearnedState` over the *prior* (the shipped model)
  mirrors the running jobs; a view's ``predict`` and its running jobs' ``ratio`` come from it;
* every ``report_s`` of simulated time each running job that is past its restore reports its
  true rate x ``exp(measurement_noise * z)`` (z standard normal, drawn in start order from
  ``numpy.random.default_rng([seed, 1])``); the learner takes the reports as they arrive. Rates
  change only at events, so the reports between two events are added at once (their log sum has
  the same distribution: ``n ln r + sigma sqrt(n) z``);
* the world's link loads (a ``link`` world's per-link utilisation, what the simulated probe reads)
  fill ``view.link_load``; the learned model in the simulator uses none of it as background
  (every byte on a simulated link is a managed job's, so nothing is unexplained);
* :attr:`log` records, at every re-rate of a running job, its true ratio beside the prior's and
  the learned model's (the predictor's error over time; ``bench/learned_contention.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from deepshare.core.contention.base import ContentionModel, ContentionState, RunningJob
from deepshare.core.contention.learned import MIN_RATIO, ContentionLearner, LearnedContention, LearnedState
from deepshare.core.information import InformationModel
from deepshare.core.topology import Topology
from deepshare.core.workloads import Catalog


@dataclass(frozen=True, slots=True)
class RatioSample:
    """One re-rate of a running job: its true ratio and what the prior and the learner say."""

    time: float
    finished: int
    """Jobs finished before this moment (for "after the first 10% of a trace's jobs")."""
    job_id: str
    model: str
    truth: float
    prior: float
    learned: float


class SimulatedKnowledge:
    """The learned model of one simulation, the reports that feed it and its error log."""

    def __init__(self, prior: ContentionModel, topology: Topology, catalog: Catalog, information: InformationModel,
                 learner: ContentionLearner | None = None) -> None:
        self.learner = learner or ContentionLearner()
        self.state: LearnedState = LearnedContention(prior, self.learner).new_state(topology, catalog)
        self.report_s = float(information.report_s)
        self.noise = float(information.measurement_noise)
        self._rng = np.random.default_rng([information.estimate_seed, 1])
        self._next_report = 1
        """Index k of the next report time k x report_s not yet accounted."""
        self.log: list[RatioSample] = []

    # -- the running set -----------------------------------------------------------------------
    def add(self, job: RunningJob) -> None:
        self.state.add(job)

    def remove(self, job_id: str) -> None:
        self.state.remove(job_id)

    def ratio(self, job_id: str) -> float:
        return self.state.ratio(job_id)

    # -- reports -------------------------------------------------------------------------------
    def report_until(self, t: float, running: Iterable[tuple[str, str, float, float]]) -> None:
        """Every report due at times k x report_s <= ``t`` not yet taken, for the running jobs
        ``(job_id, model, true ratio, reporting since)``, where a job reports from the first
        report time after ``reporting since`` (its start, or the end of its restore)."""
        last = math.floor(t / self.report_s)
        first = self._next_report
        if last < first:
            return
        self._next_report = last + 1
        due = []
        for job_id, model, truth, since in running:
            start = max(first, math.floor(since / self.report_s) + 1)
            if last >= start and truth > 0.0:
                due.append((job_id, model, truth, last - start + 1))
        if not due:
            return
        z = self._rng.standard_normal(len(due)).tolist() if self.noise > 0 else [0.0] * len(due)
        prior_ratio, add, noise, log = self.state.prior_ratio, self.learner.add_sums, self.noise, math.log
        for (job_id, model, truth, n), draw in zip(due, z):
            x = log(max(min(prior_ratio(job_id), 1.0), MIN_RATIO))
            add(model, n, x, n * log(truth) + noise * math.sqrt(n) * draw)
        self.learner.refit(model for _, model, _, _ in due)

    def record(self, t: float, finished: int, job_id: str, model: str, truth: float) -> None:
        """A running job was re-rated to ``truth``: log it beside the prior's and learned ratios."""
        self.log.append(RatioSample(t, finished, job_id, model, truth, self.state.prior_ratio(job_id),
                                    self.state.ratio(job_id)))


class LazyLoads(Mapping[str, float]):
    """``view.link_load`` read from the world's state on first use (most policies never look)."""

    __slots__ = ("_read", "_loads")

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self._read: Callable[[], dict[str, float]] | None = read
        self._loads: dict[str, float] = {}

    def _get(self) -> dict[str, float]:
        if self._read is not None:
            self._loads, self._read = self._read(), None
        return self._loads

    def __getitem__(self, key: str) -> float:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def world_loads(state: ContentionState) -> Callable[[], dict[str, float]] | None:
    """The world state's link loads as a probe would read them, if the model has links."""
    loads = getattr(state, "link_loads", None)
    return loads if callable(loads) else None
