"""Jobs that finished before now: what history-based policies learn job lengths from.

A live cluster knows how long its finished jobs ran, and who ran them; it never knows how long
the running ones will. :class:`JobHistory` holds the finished jobs of a run (the simulator adds
each at its completion; the live scheduler reads them from its journal; the placement service
from the request) and past jobs given up front (``--history FILE``), oldest first, and answers
the two questions the field's baselines ask of it:

* :meth:`JobHistory.service_samples`: the GPU-service of the most recent finished jobs, the
  distribution Tiresias' 2D-Gittins index is computed on;
* :meth:`JobHistory.forecast`: a job's run time predicted from finished jobs that share its
  recurring group, its user and GPU count, its user, its virtual cluster and GPU count, its GPU
  count, or any job (Helios' QSSF estimator's idea; the finest level with enough jobs wins);
* :meth:`JobHistory.estimate_error`: how the finished jobs' estimates compared with their run
  times (bias and spread of log(run / estimate)): what an estimate is worth on this cluster.

Nothing here sees a job before it finished: the history only grows, at completion times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from deepshare.core.bounds import MAX_DURATION_S, clamp
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, check_sample_work, default_catalog

HISTORY_WINDOW = 10_000
"""Finished jobs a history learns from (the most recent): bounds the cost of the Gittins index
and the size of the history the placement service takes with a request, and lets both the index
and the forecasts follow a workload that drifts. The simulator, the service and the live
scheduler all use it, so a policy learns from the same jobs wherever it runs."""

LEVELS: tuple[tuple[str, ...], ...] = (("group",), ("user", "gpus"), ("user",), ("vc", "gpus"), ("gpus",), ())
"""Forecast levels, finest first: the fields two jobs must share to inform each other."""
MIN_JOBS: dict[tuple[str, ...], int] = {("group",): 1, (): 1}
"""Finished jobs a level needs before it forecasts (:data:`DEFAULT_MIN_JOBS` where not listed):
one earlier run of the same recurring job is evidence enough; a user's or a size's spread is
wide, so those wait for a second job."""
DEFAULT_MIN_JOBS = 2
MIN_RUN_S = 1e-3
"""The shortest run time the forecasts' log-space moments take a finished job at: a run of
1e-20 s (a client's ``end - start`` of two equal clocks) put a spread of 32 in log space beside a
year's job, far outside anything a policy was trained on, and the learned policies then left a
free cluster idle. No training job runs a millisecond, so nothing real moves."""


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """A finished job as a scheduler records it."""

    job_id: str
    model: str
    gpus: int
    run_s: float
    """Seconds it held its GPUs over all its runs (contention and restores included)."""
    finish_s: float = 0.0
    user: str | None = None
    group: str | None = None
    vc: str | None = None
    estimate_s: float | None = None
    """The estimate of its run time it came with, if it had one."""

    @property
    def gpu_service_s(self) -> float:
        """GPU-seconds it held: Tiresias' 2D service."""
        return self.run_s * self.gpus

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus <= 0:
            raise DeepShareError(f"finished job {self.job_id!r}: gpus must be a positive integer, got {self.gpus!r}")
        if not (isinstance(self.run_s, (int, float)) and 0 < self.run_s < math.inf):
            raise DeepShareError(f"finished job {self.job_id!r}: run_s must be a positive number of seconds, got {self.run_s!r}")
        if self.estimate_s is not None and not (isinstance(self.estimate_s, (int, float)) and 0 < self.estimate_s < math.inf):
            raise DeepShareError(f"finished job {self.job_id!r}: estimate_s must be a positive number of seconds, got {self.estimate_s!r}")


class Forecast(NamedTuple):
    """A predicted run time and what backs it."""

    run_s: float
    """Geometric mean of the matching finished jobs' run times, seconds."""
    jobs: int
    """How many finished jobs it rests on (0: no history; ``run_s`` is then the caller's fallback)."""
    spread: float
    """Standard deviation of their log run times (0 with one job)."""
    level: str
    """Which jobs matched: ``group``, ``user+gpus``, ``user``, ``vc+gpus``, ``gpus``, ``any`` or ``none``."""


class EstimateError(NamedTuple):
    """How finished jobs' estimates compared with their run times: ``log(run / estimate)``."""

    jobs: int
    """Finished jobs (in the window) that had an estimate."""
    bias: float
    """Mean of log(run / estimate): negative when estimates run long (limits over-asked)."""
    spread: float
    """Standard deviation of log(run / estimate) (0 with one job)."""


_ESTIMATE_KEY = ("estimate", ())
_UNASKED = object()


class _Moments:
    __slots__ = ("n", "s", "ss")

    def __init__(self) -> None:
        self.n, self.s, self.ss = 0, 0.0, 0.0

    @staticmethod
    def of(other: "_Moments") -> "_Moments":
        copy = _Moments()
        copy.n, copy.s, copy.ss = other.n, other.s, other.ss
        return copy


class JobHistory:
    """Finished jobs, oldest first; only ever appended to (see the module doc).

    ``version`` counts the jobs added, so a policy can keep answers computed from one state of
    the history until it grows. The per-level statistics and the sorted service samples are
    brought up to date when asked, so a run whose policies never ask pays one append per job.
    Only the last ``window`` jobs are ever read, so it keeps at most twice that many: a long run
    or a long-lived scheduler holds a bounded history (iteration gives the jobs it keeps)."""

    __slots__ = ("_jobs", "_dropped", "_window", "_indexed", "_moments", "_samples", "_samples_version", "_memo",
                 "_memo_version", "_estimates")

    def __init__(self, past: Iterable[FinishedJob] = (), window: int = HISTORY_WINDOW) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise DeepShareError(f"history window must be a positive integer, got {window!r}")
        self._jobs: list[FinishedJob] = list(past)[-window:]
        self._dropped = 0
        self._window = window
        self._indexed = 0
        self._moments: dict[tuple, _Moments] = {}
        self._samples: np.ndarray = np.empty(0)
        self._samples_version = 0
        self._memo: dict = {}
        self._memo_version = len(self._jobs)
        self._estimates: Mapping[str, float | None] | None = None

    def add(self, job: FinishedJob) -> None:
        estimates = self._estimates
        if estimates is not None and job.estimate_s != estimates.get(job.job_id):
            job = replace(job, estimate_s=estimates.get(job.job_id))
        self._jobs.append(job)
        if len(self._jobs) >= 2 * self._window:
            self._trim()

    def _trim(self) -> None:
        """Drop the jobs that left the window, after taking them out of the statistics."""
        if self._indexed:
            self._index()
        drop = len(self._jobs) - self._window
        del self._jobs[:drop]
        self._dropped += drop
        self._indexed = max(0, self._indexed - drop)

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._jobs)

    @property
    def version(self) -> int:
        """Jobs added since it was made (with those it was made with): grows with every job."""
        return self._dropped + len(self._jobs)

    def memo(self) -> dict:
        """A dict for answers computed from the history as it is now (a policy's forecasts and
        indices at one decision), emptied when the history grows: the next decision after a
        completion asks again, every other one reuses them."""
        if self._memo_version != self.version:
            self._memo, self._memo_version = {}, self.version
        return self._memo

    def copy(self) -> "JobHistory":
        """An independent history with the same jobs (a what-if goes on from it)."""
        return JobHistory(self._jobs, self._window)

    def fork(self, estimates: Mapping[str, float | None] | None = None) -> "JobHistory":
        """An independent history with the same jobs that keeps what this one has computed from
        them: its statistics (copied) and its memo (shared while neither grows: the same jobs give
        the same answers), so a what-if that goes on from it asks nothing again until a job of its
        own finishes. ``estimates``: the estimate each job added to the fork is recorded with, by
        job id (None where absent), whatever the job says: a planner's copy of the cluster, run
        ``exact``, records the estimates the real run shows, not its own."""
        fork = JobHistory.__new__(JobHistory)
        fork._jobs, fork._dropped, fork._window = list(self._jobs), self._dropped, self._window
        fork._indexed = self._indexed
        fork._moments = {key: _Moments.of(m) for key, m in self._moments.items()}
        fork._samples, fork._samples_version = self._samples, self._samples_version  # read-only, replaced when stale
        fork._memo, fork._memo_version = self.memo(), self.version
        fork._estimates = estimates
        return fork

    # -- Gittins ---------------------------------------------------------------------------------
    def service_samples(self) -> np.ndarray:
        """Sorted GPU-service (GPU-seconds) of the last ``window`` finished jobs (read-only)."""
        if self._samples_version != self.version:
            recent = self._jobs[-self._window:]
            samples = np.sort(np.fromiter((j.run_s * j.gpus for j in recent), float, len(recent)))
            samples.flags.writeable = False
            self._samples, self._samples_version = samples, self.version
        return self._samples

    # -- forecasts -------------------------------------------------------------------------------
    def forecast(self, gpus: int, user: str | None = None, group: str | None = None, vc: str | None = None) -> Forecast | None:
        """The run time the finished jobs predict for a job of ``gpus`` GPUs with these features,
        from the finest level (:data:`LEVELS`) with enough jobs (:data:`MIN_JOBS`); None when
        no job has finished."""
        self._index()
        values = {"gpus": gpus, "user": user, "group": group, "vc": vc}
        for level in LEVELS:
            key = tuple(values[f] for f in level)
            if None in key:
                continue
            m = self._moments.get((level, key))
            if m is None or m.n < MIN_JOBS.get(level, DEFAULT_MIN_JOBS):
                continue
            mean = m.s / m.n
            var = max(0.0, m.ss / m.n - mean * mean)
            return Forecast(math.exp(mean), m.n, math.sqrt(var), "+".join(level) or "any")
        return None

    def level_spread(self, level: str) -> float | None:
        """The pooled spread of log run times *within* the keys of a forecast level (``group``,
        ``user+gpus``, ...): how far a job typically lies from the others of its group, user or
        size. None until some key of the level has two jobs. What a forecast from that level is
        worth: a group's runs are alike, a user's jobs much less so."""
        self._index()
        memo = self.memo()
        found = memo.get(("level-spread", level), _UNASKED)
        if found is _UNASKED:
            fields = () if level == "any" else tuple(level.split("+"))
            within = dof = 0.0
            for (lvl, _), m in self._moments.items():
                if lvl == fields and m.n >= 2:
                    within += max(0.0, m.ss - m.s * m.s / m.n)  # n x the key's variance
                    dof += m.n - 1
            found = memo[("level-spread", level)] = math.sqrt(within / dof) if dof else None
        return found

    def estimate_error(self) -> EstimateError:
        """Bias and spread of the window's finished jobs' ``log(run / estimate)`` (zeros when no
        finished job had an estimate)."""
        self._index()
        m = self._moments.get(_ESTIMATE_KEY)
        if m is None:
            return EstimateError(0, 0.0, 0.0)
        mean = m.s / m.n
        return EstimateError(m.n, mean, math.sqrt(max(0.0, m.ss / m.n - mean * mean)))

    def _index(self) -> None:
        """Fold the jobs added since the last question into the per-level moments, and take out
        the jobs that left the window."""
        jobs, window = self._jobs, self._window
        old_lo, old_hi = max(0, self._indexed - window), self._indexed
        new_lo, new_hi = max(0, len(jobs) - window), len(jobs)
        for i in range(old_lo, min(old_hi, new_lo)):  # left the window
            self._fold(jobs[i], -1)
        for i in range(max(old_hi, new_lo), new_hi):
            self._fold(jobs[i], 1)
        self._indexed = new_hi

    def _fold(self, job: FinishedJob, sign: int) -> None:
        log_run = math.log(max(job.run_s, MIN_RUN_S))
        values = {"gpus": job.gpus, "user": job.user, "group": job.group, "vc": job.vc}
        moments = self._moments
        for level in LEVELS:
            key = tuple(values[f] for f in level)
            if None in key:
                continue
            m = moments.get((level, key))
            if m is None:
                m = moments[(level, key)] = _Moments()
            m.n += sign
            m.s += sign * log_run
            m.ss += sign * log_run * log_run
            if m.n == 0:
                del moments[(level, key)]
        if job.estimate_s is not None:  # bounded as the run is and as a job's own estimate is (posterior.py):
            # an exact 1e-9 s estimate of a 1e-9 s run counted as a 10^6x underestimate
            error = log_run - math.log(clamp(job.estimate_s, MIN_RUN_S, MAX_DURATION_S))  # as the posterior reads one
            m = moments.get(_ESTIMATE_KEY)
            if m is None:
                m = moments[_ESTIMATE_KEY] = _Moments()
            m.n += sign
            m.s += sign * error
            m.ss += sign * error * error
            if m.n == 0:
                del moments[_ESTIMATE_KEY]


def history_from_jobs(jobs: Iterable[JobSpec], catalog: Catalog | None = None) -> JobHistory:
    """A history of past jobs given as a trace: each ran its isolated run time (its
    ``duration_s``, or its samples at the catalog's reference throughput) and finished at its
    submit time plus that; features as the trace gives them."""
    catalog = catalog or default_catalog()
    jobs = list(jobs)
    check_sample_work(jobs, catalog)  # a run given in samples is bounded as the trace's are (a year at most)
    past = []
    for job in jobs:
        run_s = job.duration_s if job.duration_s is not None else job.total_samples / catalog.reference_throughput(job.model, job.gpus)  # type: ignore[operator]
        past.append(FinishedJob(job.job_id, job.model, job.gpus, run_s, job.submit_time + run_s, job.user, job.group, job.vc,
                                job.requested_s))
    past.sort(key=lambda j: j.finish_s)
    return JobHistory(past)
