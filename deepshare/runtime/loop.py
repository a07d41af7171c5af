"""The control loop: journal + Ray's nodes + measured link load -> ClusterView -> policy -> actions.

Each :meth:`ControlLoop.tick`:

1. reads the alive GPU nodes (the launcher's ``cluster()``, or ``cluster_fn`` when given);
2. polls every running job's workers: finished -> FINISHED, a rank failed -> FAILED, a worker
   or node gone -> QUEUED (resumes from its last checkpoint), cancel asked -> stopped, CANCELLED;
3. builds the policy's view with :func:`deepshare.core.snapshot.build_view` (the one way a
   non-simulator builds it), records each running job's measured throughput beside the
   simulator's prediction for its placement (``catalog.throughput(model, gpus, nodes) * ratio``,
   the ratio of the shipped contention model); with ``learning``
   (:class:`~deepshare.runtime.learning.LiveLearning`, ``--contention-knowledge learned``) the
   view's predictions and running ratios come from the model it refits from those records on a
   schedule, over the measured link load the running jobs do not explain;
4. asks the policy within the decision deadline (``decision_timeout_s``: the planner answers
   within it; a policy still deciding at it is stopped and the tick applies nothing), checks the
   decision (an infeasible one is logged and skipped, never "fixed"), then applies it: preempt and migrate (ask the jobs to checkpoint and exit),
   then migrations' and launches' new runs.

Stopping a run (cancel, preempt, migrate) never holds the loop: the tick asks the run to
checkpoint and exit and waits for it at most ``stop_wait_s``; a run still going then is *stopping*,
and later ticks poll it, ending it once it exits, or removing it once ``preempt_grace_s`` has
passed since the request. While it stops it holds its GPUs and stays among the view's running
jobs; a launch of the decision that needs GPUs a stopping run still holds waits for a later tick
(the policy decides again then), and the rest of the decision is applied. So one job that ignores
its stop request delays only what needs its GPUs, not every tenant's launches and ends.

Nothing a job writes is trusted: its progress reports are checked
(:mod:`deepshare.runtime.reports`) before the journal, the views or the learned contention model
see them; a bad one is dropped with one log line naming the job and the field. One job's bad
data never stops the others: a tick step that fails on one job's data (its report, its view, a
policy that raises on it) *isolates* that job, FAILED with the reason, and the tick goes on
(:data:`DATA_ERRORS`; a policy failure is traced to its jobs by deciding on halves of the view,
at most :data:`MAX_PROBES` decisions). Failures of the cluster itself (Ray, the OS) and of the
policy's service (:class:`~deepshare.core.errors.Unavailable`: a placement service unreachable or
out of time) are not a job's fault: they fail the tick, which the next one retries.

A launch that fails (a program that cannot be executed, a missing ``working_dir``) requeues
the job, hidden from the policy for a back-off (``launch_retry_s``, doubling per consecutive
failure, at most a minute); after ``max_launch_attempts`` consecutive failures the job is
FAILED with the last error. GPUs not granted in time do not count (that is a wait for capacity).

It never branches on a policy's name: any :class:`~deepshare.policies.Policy` (or the HTTP
placement client, which has the same ``decide``) works. Everything it does on the cluster goes
through an injected :class:`~deepshare.runtime.ports.Launcher` (Ray's by default), so its logic
is tested without Ray (``tests/runtime/test_control_loop.py``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from deepshare.core.bounds import MAX_DURATION_S
from deepshare.core.contention import ContentionModel
from deepshare.core.deadline import Deadline, DecisionTimeout, bounded
from deepshare.core.feasibility import check_view_decision
from deepshare.core.history import HISTORY_WINDOW, FinishedJob, JobHistory
from deepshare.core.information import believed_remaining_s
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.errors import DeepShareError, InfeasibleDecision, Unavailable, first_line
from deepshare.core.fabric import Fabric
from deepshare.core.types import Decision, Placement
from deepshare.core.view import DEFAULT_MOVE_S, DEFAULT_RESTORE_S, ClusterView, JobView
from deepshare.core.workloads import Catalog
from deepshare.runtime.cluster import ClusterState
from deepshare.runtime.defaults import DEFAULT_DECISION_TIMEOUT_S
from deepshare.runtime.journal import LAUNCH_FAILED, TERMINAL, JobRecord, JobState, Journal, TransitionError
from deepshare.runtime.launcher import LaunchError, LaunchSettings, RayLauncher, RunPhase
from deepshare.runtime.learning import LiveLearning
from deepshare.runtime.ports import Launcher
from deepshare.runtime.reports import BadReport, Progress, check_report, merged
from deepshare.runtime.retention import Retention
from deepshare.runtime.worker import Report

log = logging.getLogger(__name__)

MAX_SCOPED_CHARS = 256
"""Longest user, group or vc the policy's view carries under ``scope_history``: the placement
service's field length (:mod:`deepshare.serving.schemas`), which refused a longer one in every
request (a finished job's, in the history: every decision)."""

DATA_ERRORS: tuple[type[BaseException], ...] = (
    ArithmeticError, ValueError, TypeError, LookupError, AttributeError, sqlite3.InterfaceError,
    sqlite3.ProgrammingError, DeepShareError,
)
"""What a step raises when one job's data is at fault (a number out of range, a value of the wrong
type): the job is isolated. Anything else (Ray, the OS) fails the tick, and the next retries."""
MAX_PROBES = 64
"""Most extra decisions one tick spends tracing a failing policy to the jobs it fails on."""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    interval_s: float = 1.0
    """Seconds between two ticks."""
    preempt_grace_s: float = 30.0
    """How long a stopped job (cancelled, preempted, migrated) may take to checkpoint and exit
    before its placement group is removed."""
    stop_wait_s: float = 1.0
    """How long the tick that asks runs to stop waits for them (at most ``preempt_grace_s``); runs
    still going are polled by later ticks, which do not wait for them."""
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    max_launch_attempts: int = 3
    """Consecutive failed launches after which a job is FAILED."""
    launch_retry_s: float = 1.0
    """Back-off after a failed launch, doubled for each further consecutive failure (at most 60 s)."""
    keep_finished_s: float | None = None
    """Ended jobs older than this are deleted from the journal, with their logs
    (:mod:`deepshare.runtime.retention`); None: every job is kept."""
    decision_timeout_s: float | None = DEFAULT_DECISION_TIMEOUT_S
    """Seconds one decision may take. A policy that can answer early (the planner) answers within
    it; one still deciding at it is stopped where it checks (every step of a learned policy and of
    the planner's rollouts), and the tick applies nothing and says so. None: no bound."""


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did (for logs and tests)."""

    decision: Decision | None = None
    launched: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    """Jobs asked to stop for a preemption this tick (not those asked on an earlier one)."""
    migrated: tuple[str, ...] = ()
    """Jobs whose new run started this tick (a migration waits while the old run is stopping)."""
    ended: tuple[tuple[str, str], ...] = ()
    """``(job_id, new state)`` for runs that ended this tick."""
    error: str | None = None


class ControlLoop:
    """One scheduler's loop over one journal. Not thread-safe: one thread ticks."""

    def __init__(
        self,
        journal: Journal,
        policy: Any,
        catalog: Catalog,
        contention: ContentionModel,
        config: LoopConfig = LoopConfig(),
        *,
        cluster_fn: Callable[[], ClusterState] | None = None,
        launcher: Launcher | None = None,
        link_load_fn: Callable[[], Mapping[str, float]] | None = None,
        working_dir: str | None = None,
        policy_name: str = "policy",
        metrics: Any = None,
        learning: LiveLearning | None = None,
        stop_clock: Callable[[], float] = time.monotonic,
        scope_history: bool = False,
    ) -> None:
        self.journal = journal
        self.scope_history = scope_history
        """Under a tenants file: a job's ``user``, ``group`` and ``vc`` (self-reported) are read
        within its queue (fixed at submission), so that one tenant's finished jobs never stand
        in another's history forecasts (:meth:`_scoped`)."""
        self.policy = policy
        self.catalog = catalog
        self.contention = contention
        self.config = config
        self.launcher: Launcher = launcher if launcher is not None else RayLauncher(journal.run_names)
        """Where runs are started, polled, stopped and removed (Ray's, naming runs after this
        journal's instance id, when none is given)."""
        self.cluster_fn: Callable[[], ClusterState] = cluster_fn if cluster_fn is not None else self.launcher.cluster
        """The alive GPU nodes: ``cluster_fn`` when given, else the launcher's ``cluster``."""
        self.link_load_fn = link_load_fn
        self.working_dir = working_dir
        self.policy_name = policy_name
        self.metrics = metrics
        """A :class:`~deepshare.runtime.metrics.SchedulerMetrics`, or None."""
        self.learning = learning
        """The learned contention model the views predict with (None: ``contention`` itself)."""
        self.last_error: str | None = None
        self.ticks = 0
        """Ticks completed (failed ones included): ``/healthz`` answers 200 once there is one."""
        self.history = JobHistory()
        """The journal's finished jobs (the last :data:`HISTORY_WINDOW`), as the policies see them."""
        self._history_mark: tuple[float, int] | None = None
        """(finish time, seq) of the last finished job read into :attr:`history`."""
        self._progress: dict[tuple[str, int], Progress] = {}
        """Each live run's last good report, by (job id, attempt)."""
        self._cleared: set[str] = set()
        self._suspects: set[str] = set()
        """The smallest set of jobs a search cut short found the policy failing on: the next
        search starts from it rather than from all the jobs again."""
        """Jobs a probe of the running search for a failing policy's culprits decided on without
        failing (:meth:`_culprits`); emptied once the policy decides again."""
        self._bad_reports: dict[str, str] = {}
        """The last problem logged for each job's report (logged again only when it changes)."""
        self._stopping: dict[str, _Stopping] = {}
        """Runs asked to stop that had not exited when their tick went on, by job id."""
        self._stop_clock = stop_clock
        """Seconds, never set back, that stop requests' grace is counted in (a test's clock)."""
        keep = None if config is None else config.keep_finished_s  # None: a test's loop that only recovers
        self.retention = None if keep is None else Retention(keep)
        """Deletes the ended jobs older than ``--keep-finished`` (None: none is deleted)."""

    # -- recovery ------------------------------------------------------------------------------
    def recover(self) -> tuple[list[str], list[str]]:
        """After a (re)start: re-attach to runs still on the cluster, requeue the rest.

        Returns ``(reattached, requeued)`` job ids. Leftovers of a run that cannot be re-attached
        (a placement group without all its workers) are removed before the job is requeued, so
        the job can never run twice at once. A re-attached run's nodes are given back the names
        its placement was journalled under (:meth:`~deepshare.runtime.ports.Launcher.remember`):
        a restarted scheduler names nodes afresh, and a node read under another name is "lost".
        """
        reattached, requeued = [], []
        for job in self.journal.jobs(JobState.RUNNING):
            if self.launcher.exists(job.job_id, job.attempt, job.spec.gpus):
                if job.placement is not None:
                    self.launcher.remember(job.job_id, job.attempt, job.placement)
                reattached.append(job.job_id)
                continue
            self.launcher.teardown(job.job_id, job.attempt, job.spec.gpus)
            self.journal.end_run(job.job_id, job.attempt, JobState.QUEUED, "scheduler restarted; run not found")
            requeued.append(job.job_id)
        return reattached, requeued

    # -- one tick ------------------------------------------------------------------------------
    def tick(self) -> TickReport:
        cluster = self.cluster_fn()
        for job_id, attempt, ranks in self.journal.orphans():  # runs of quarantined journal rows
            log.warning("removing run %d of quarantined job %s from the cluster", attempt, job_id)
            self.launcher.teardown(job_id, attempt, ranks)
            self.journal.orphan_removed(job_id, attempt)
        ended = self._reap(cluster)
        self._prune()
        running = self.journal.jobs(JobState.RUNNING)
        queued = self._launchable(self.journal.jobs(JobState.QUEUED), ended)
        if not cluster.nodes:
            return TickReport(ended=tuple(ended), error="no alive GPU nodes")
        if self.learning is not None:  # the journal first: the refit reads this tick's records
            self._record_shipped_predictions(cluster, running)
            self._refit()
        view = self._view(cluster, queued, running)
        if self.learning is None:
            self._record_predictions(view, running)
        if not view.queued and not view.running:
            return TickReport(ended=tuple(ended))
        try:
            decision, view = self._decide(view, cluster, ended)
            check_view_decision(decision, view)
        except DecisionTimeout as exc:  # a BaseException (no policy may swallow it): nothing is applied
            self.last_error = f"policy {self.policy_name}: {exc}; nothing applied this tick"
            log.error("%s", self.last_error)
            return TickReport(ended=tuple(ended), error=self.last_error)
        except (DeepShareError, ValueError, KeyError, RuntimeError, OSError, ArithmeticError, TypeError) as exc:
            # An infeasible decision is an error, never silently fixed: skip it, say so, retry next tick.
            self.last_error = f"policy {self.policy_name}: {exc}"
            log.error("%s", self.last_error)
            return TickReport(ended=tuple(ended), error=self.last_error)
        if decision.empty:
            return TickReport(decision, ended=tuple(ended))
        return self._apply(decision, view, cluster, ended)

    def _decide(self, view: ClusterView, cluster: ClusterState,
                ended: list[tuple[str, str]]) -> tuple[Decision, ClusterView]:
        """The policy's decision on ``view``. When the policy fails on a job's data, the jobs it
        fails on are isolated and it decides again on a view without them (once): the decision
        and the view it was made on. All of it within one decision timeout
        (:attr:`LoopConfig.decision_timeout_s`)."""
        deadline = Deadline(self.config.decision_timeout_s)
        try:
            decision = self._timed_decide(view, deadline)
            self._cleared.clear()  # the policy decides again: a later failure searches afresh
            self._suspects.clear()
            return decision, view
        except (InfeasibleDecision, Unavailable):  # the policy's service, not a job, failed: no search
            raise
        except DATA_ERRORS as exc:
            culprits = self._culprits(cluster, view.link_load, deadline)
            if not culprits:
                raise
            for job in culprits:
                self._isolate(job, f"the policy {self.policy_name} fails on it ({first_line(exc)})", ended)
            view = self._view(cluster, self._launchable(self.journal.jobs(JobState.QUEUED), ended),
                              self.journal.jobs(JobState.RUNNING), link_load=view.link_load)
            return self._timed_decide(view, deadline), view

    def _timed_decide(self, view: ClusterView, deadline: Deadline) -> Decision:
        """:meth:`_bounded_decide`, its duration recorded (a decision stopped at the deadline too)."""
        started = time.perf_counter()
        try:
            return self._bounded_decide(view, deadline)
        finally:
            if self.metrics is not None:
                self.metrics.decision_latency.observe(time.perf_counter() - started)

    def _bounded_decide(self, view: ClusterView, deadline: Deadline) -> Decision:
        """The policy's decision within ``deadline``; :class:`DecisionTimeout` when it is still
        deciding past it."""
        with bounded(deadline):
            return self.policy.decide(view)

    def _culprits(self, cluster: ClusterState, link_load: Mapping[str, float], deadline: Deadline) -> list[JobRecord]:
        """The jobs the policy fails on: halves of the queued and running jobs are decided on
        apart until each failing half is one job (at most :data:`MAX_PROBES` decisions). None
        unless some half was decided on: a policy that fails on every job is broken, and its
        jobs are not to blame. The probes stop at ``deadline``; the jobs of every half decided on
        without failing (:attr:`_cleared`) are left out of the next tick's search, so a slow
        policy's search goes on where it stopped instead of probing the same halves again, from
        the smallest set it found failing (:attr:`_suspects`): a policy that allows few probes a
        tick went down the same failing halves from the top every tick and never got there. A probe
        the policy's service could not answer (:class:`~deepshare.core.errors.Unavailable`) ends
        the search too (an outage mid-search must not read as every later job failing), and the
        next search starts afresh: the halves it cleared before the outage do not count as passed
        when the service comes back answering otherwise."""
        budget = [MAX_PROBES]
        passed = [bool(self._cleared)]
        gone = [False]

        def fails(jobs: list[JobRecord]) -> bool:
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            queued = [j for j in jobs if j.state is JobState.QUEUED]
            running = [j for j in jobs if j.state is JobState.RUNNING]
            try:
                self._bounded_decide(self._view(cluster, queued, running, link_load=link_load), deadline)
            except InfeasibleDecision:
                return False
            except DecisionTimeout:
                budget[0] = 0  # no time left for more probes
                return False
            except Unavailable:
                budget[0] = 0  # the policy's service went away: no more probes, and what it cleared before
                gone[0] = True  # is not carried to a later search (its answers may not be the same then)
                return False
            except DATA_ERRORS:
                return True
            passed[0] = True
            self._cleared.update(j.job_id for j in jobs)
            return False

        smallest: list[list[JobRecord]] = []

        def search(jobs: list[JobRecord], known_to_fail: bool = False) -> list[JobRecord]:
            if not jobs or not (known_to_fail or fails(jobs)):
                return []
            if not smallest or len(jobs) < len(smallest[0]):
                smallest[:] = [jobs]
            if len(jobs) == 1:
                return jobs
            half = len(jobs) // 2
            return search(jobs[:half]) + search(jobs[half:])

        candidates = [j for j in (*self.journal.jobs(JobState.QUEUED), *self.journal.jobs(JobState.RUNNING))
                      if j.job_id not in self._cleared]
        suspects = [j for j in candidates if j.job_id in self._suspects]
        found = search(suspects or candidates, known_to_fail=True)
        cut_short = budget[0] <= 0
        # Cut short (time, probes or the service) without a culprit: go on next time from the
        # smallest failing set, rather than down the same failing halves from the top again.
        self._suspects = {j.job_id for j in smallest[0]} if cut_short and not found and smallest else set()
        if gone[0] or (not found and not cut_short):  # nobody is to blame, or the service went away: afresh next time
            self._cleared.clear()
        return found if passed[0] else []

    def _isolate(self, job: JobRecord, why: str, ended: list[tuple[str, str]]) -> None:
        """Fail ``job`` with ``why``: one job's data must not stop the scheduler (see the module doc)."""
        reason = f"isolated: {why}"[:1000]
        log.error("job %s: %s", job.job_id, reason)
        try:
            current = self.journal.get(job.job_id)
            if current.state is JobState.RUNNING:
                self.launcher.teardown(current.job_id, current.attempt, current.spec.gpus)
                self.journal.end_run(current.job_id, current.attempt, JobState.FAILED, reason, error=reason)
            elif current.state is JobState.QUEUED:
                self.journal.fail_queued(current.job_id, reason)
            else:
                return
        except (DeepShareError, KeyError) as exc:  # ended meanwhile
            log.warning("job %s: not isolated: %s", job.job_id, exc)
            return
        self._forget(job.job_id)
        if self.metrics is not None:
            self.metrics.isolated_jobs.inc()
        self._count_end(JobState.FAILED)
        ended.append((job.job_id, JobState.FAILED.value))

    def _forget(self, job_id: str) -> None:
        """Drop what the loop remembers of a job's runs (its last good reports)."""
        for key in [k for k in self._progress if k[0] == job_id]:
            del self._progress[key]
        self._bad_reports.pop(job_id, None)
        self._stopping.pop(job_id, None)

    def _take_report(self, job: JobRecord, report: Report | None) -> None:
        """Record ``report`` of ``job``'s current run if it passes :func:`check_report`; else drop
        it, keep the last good counters and log the problem once."""
        if report is None:
            return
        key = (job.job_id, job.attempt)
        last = self._progress.get(key)
        try:
            if report.problem is not None:
                raise BadReport("report", report.problem)
            progress = check_report(report.document(), last)
        except BadReport as exc:
            if self._bad_reports.get(job.job_id) != str(exc):
                self._bad_reports[job.job_id] = str(exc)
                log.warning("job %s: progress report dropped, %s", job.job_id, exc)
            if self.metrics is not None:
                self.metrics.bad_reports.inc()
            return
        self._bad_reports.pop(job.job_id, None)
        current = merged(last, progress)
        if current != last:
            self._progress[key] = current
            self.journal.record_progress(job.job_id, job.attempt, progress.samples, progress.step,
                                         progress.throughput, None)

    def _refit(self) -> None:
        """Refit the learned contention model when it is due (a failure is logged, not fatal)."""
        if self.learning is None or not self.learning.due(self.journal.now()):
            return
        try:
            self.learning.refit(self.journal)
        except (DeepShareError, OSError) as exc:
            self.last_error = f"contention refit: {exc}"
            log.error("%s", self.last_error)

    def _prune(self) -> None:
        """Delete the ended jobs older than ``--keep-finished`` when a prune is due (a failure is
        logged, not fatal: the next prune tries again)."""
        if self.retention is None:
            return
        try:  # the jobs about to go are in the history first (a tick without nodes reads none)
            self._read_history()
        except (sqlite3.Error, DeepShareError) as exc:  # a row edited by hand: pruned all the same, or never again
            self.last_error = f"reading the finished jobs into the history: {exc}"
            log.error("%s", self.last_error)
        try:
            self.retention.prune(self.journal)
        except (sqlite3.Error, DeepShareError) as exc:
            self.last_error = f"pruning ended jobs: {exc}"
            log.error("%s", self.last_error)

    def _launchable(self, queued: Sequence[JobRecord], ended: list[tuple[str, str]]) -> list[JobRecord]:
        """Queued jobs the policy may launch now: not being cancelled, not backing off a failed launch."""
        now = self.journal.now()
        out = []
        for job in queued:
            if job.cancel_requested:  # a cancel marked by an older version on a queued job
                try:
                    self.journal.cancel(job.job_id)
                    ended.append((job.job_id, JobState.CANCELLED.value))
                    self._count_end(JobState.CANCELLED)
                except (KeyError, TransitionError):
                    pass
                continue
            failures, last = self.journal.launch_failures(job.job_id)
            if failures and last is not None and now < last + self.retry_delay(failures):
                continue
            out.append(job)
        return out

    def retry_delay(self, failures: int) -> float:
        """Seconds a job waits after ``failures`` consecutive failed launches."""
        return min(60.0, self.config.launch_retry_s * 2 ** max(0, failures - 1))

    def _count_end(self, state: JobState) -> None:
        if self.metrics is not None and state in TERMINAL:
            self.metrics.jobs_ended.labels(state.value).inc()

    def _reap(self, cluster: ClusterState) -> list[tuple[str, str]]:
        """Poll running jobs; end the runs that are over or lost, stop the cancelled ones, and end
        or remove the stopping ones."""
        ended: list[tuple[str, str]] = []
        stop: list[JobRecord] = []
        running = self.journal.jobs(JobState.RUNNING)
        for job in running:
            try:
                self._reap_one(job, cluster, stop, ended)
            except DATA_ERRORS as exc:
                self._isolate(job, f"its run could not be polled ({first_line(exc)})", ended)
        runs = {job.job_id: job.attempt for job in running}
        for job_id in [j for j, s in self._stopping.items() if runs.get(j) != s.attempt]:
            del self._stopping[job_id]  # that run is no longer the journal's (ended on another path)
        if stop:
            self._finish_stops(self._stop([(job, "cancelled") for job in stop]), ended)
        return ended

    def _reap_one(self, job: JobRecord, cluster: ClusterState, stop: list[JobRecord],
                  ended: list[tuple[str, str]]) -> None:
        """Poll one running job: record its report, end its run when over, or add it to ``stop``
        (cancelled, or stopping since an earlier tick)."""
        assert job.placement is not None
        world = job.spec.gpus
        if cluster.to_placement(job.placement) is None:
            self._end(job, JobState.QUEUED, "node lost; requeued to resume from its checkpoint", ended)
            return
        status = self.launcher.poll(job.job_id, job.attempt, world)
        self._take_report(job, status.report)
        if status.phase is RunPhase.RUNNING:
            stopping = self._stopping.get(job.job_id)
            if job.cancel_requested or (stopping is not None and stopping.attempt == job.attempt):
                stop.append(job)
        elif status.phase is RunPhase.FINISHED:
            self._end(job, JobState.FINISHED, "finished", ended)  # done before a cancel could stop it
        elif status.phase is RunPhase.FAILED:
            self._end(job, JobState.FAILED, "a rank failed", ended, error=status.detail[-4000:])
        elif status.phase is RunPhase.STOPPED:  # asked on an earlier tick (or before a restart)
            stopping = self._stopping.get(job.job_id)
            why = stopping.why if stopping is not None and stopping.attempt == job.attempt else "stopped on request"
            state = JobState.CANCELLED if job.cancel_requested or why == "cancelled" else JobState.QUEUED
            self._end(job, state, why, ended, preempted=state is JobState.QUEUED)
        elif status.phase is RunPhase.LOST:
            self._end(job, JobState.QUEUED, f"{status.detail}; requeued to resume from its checkpoint", ended)

    def _end(self, job: JobRecord, state: JobState, reason: str, ended: list[tuple[str, str]], *,
             preempted: bool = False, error: str | None = None, teardown: bool = True) -> None:
        if teardown:
            self.launcher.teardown(job.job_id, job.attempt, job.spec.gpus)
        try:
            self.journal.end_run(job.job_id, job.attempt, state, reason, preempted=preempted, error=error)
        except TransitionError as exc:  # another path ended it first (e.g. cancelled meanwhile)
            log.warning("%s", exc)
            return
        final = self.journal.get(job.job_id).state  # a requeue of a job being cancelled ends it CANCELLED
        self._progress.pop((job.job_id, job.attempt), None)
        self._stopping.pop(job.job_id, None)
        self._count_end(final)
        ended.append((job.job_id, final.value))

    def _stop(self, jobs: Sequence[tuple[JobRecord, str]]) -> list[JobRecord]:
        """Ask each ``(job, why)`` to checkpoint and exit (once per run: a run already stopping is
        not asked again) and wait for them at most ``stop_wait_s`` when some were asked now; the
        runs that are done: exited, or removed once ``preempt_grace_s`` has passed since their
        request. The rest stay in :attr:`_stopping` for later ticks. ``why`` (``cancelled``,
        ``preempted``, ``migrating``) is how :meth:`_finish_stops` ends the run."""
        now = self._stop_clock()
        asked = False
        for job, why in jobs:
            known = self._stopping.get(job.job_id)
            if known is None or known.attempt != job.attempt:
                self.launcher.request_stop(job.job_id, job.attempt, job.spec.gpus)
                self._stopping[job.job_id] = _Stopping(job.attempt, now + self.config.preempt_grace_s, why)
                asked = True
        wait_s = min(self.config.stop_wait_s, self.config.preempt_grace_s) if asked else 0.0
        wait_until = time.monotonic() + wait_s  # this tick's wait, in real time
        pending = [job for job, _ in jobs]
        done: list[JobRecord] = []
        while True:
            still = []
            for job in pending:
                status = self.launcher.poll(job.job_id, job.attempt, job.spec.gpus)
                try:
                    self._take_report(job, status.report)
                except DATA_ERRORS as exc:  # it is being stopped anyway: its report is lost, not the stop
                    log.warning("job %s: report not recorded (%s)", job.job_id, first_line(exc))
                (still if status.phase in (RunPhase.RUNNING, RunPhase.UNKNOWN) else done).append(job)
            pending = still
            left = wait_until - time.monotonic()
            if not pending or left <= 0:
                break
            time.sleep(min(0.2, self.config.interval_s, left))
        now = self._stop_clock()
        for job in pending:
            if now >= self._stopping[job.job_id].deadline:
                log.warning("job %s did not exit within %g s of the stop request; removing it",
                            job.job_id, self.config.preempt_grace_s)
                done.append(job)
        return done

    def _finish_stops(self, done: Sequence[JobRecord], ended: list[tuple[str, str]]) -> None:
        """Remove and end the runs :meth:`_stop` found done, each as it was stopped for."""
        for job in done:
            why = self._stopping[job.job_id].why
            self.launcher.teardown(job.job_id, job.attempt, job.spec.gpus)
            if why == "cancelled":
                self._end(job, JobState.CANCELLED, "cancelled", ended, teardown=False)
            else:
                self._end(job, JobState.QUEUED, why, ended, preempted=True, teardown=False)

    # -- the view ------------------------------------------------------------------------------
    def _remaining_s(self, job: JobRecord) -> float:
        """What the scheduler believes is left: from the job's own progress reports when it
        says how much work it has, else the simulator's ``estimated`` rule (its estimate, or the
        flat prior, minus the time it has run: :func:`believed_remaining_s`)."""
        spec = job.spec
        ran = job.attained_gpu_s / spec.gpus
        if job.run_started is not None:
            ran += max(0.0, self.journal.now() - job.run_started)
        estimate = spec.estimate_s
        if spec.total_samples is not None and job.samples is not None:
            left = max(0.0, 1.0 - job.samples / spec.total_samples)
            if estimate is not None:
                return left * estimate
            if job.throughput:  # at most a year: a job reporting a trickle of samples/s is not infinitely long
                return min(MAX_DURATION_S, max(0.0, spec.total_samples - job.samples) / job.throughput)
        return believed_remaining_s(estimate, ran)

    def _scoped(self, job: JobRecord, value: str | None) -> str | None:
        """``value`` (a job's user, group or vc) as the history keys it: prefixed with the job's
        queue under :attr:`scope_history` (length-prefixed: no two (queue, value) pairs meet)."""
        queue = job.spec.queue
        if value is None or not self.scope_history or queue is None:
            return value
        scoped = f"{len(queue)}:{queue}:{value}"
        if len(scoped) <= MAX_SCOPED_CHARS:
            return scoped
        # a 256-character tag in a 253-character queue: kept within what the placement service
        # takes (--placement-url), apart from every other by a digest of the whole
        digest = hashlib.blake2b(scoped.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        return scoped[:MAX_SCOPED_CHARS - len(digest) - 1] + "~" + digest

    def _known(self, job: JobRecord, placement: Placement | None) -> KnownJob:
        epoch, now = self.journal.epoch, self.journal.now()
        last = (now - job.run_started) if job.run_started is not None else job.last_run_s
        attained = job.attained_gpu_s + (max(0.0, now - job.run_started) * job.spec.gpus if job.run_started else 0.0)
        return KnownJob(
            job_id=job.job_id, model=job.spec.model, gpus=job.spec.gpus, submit_time=job.submit_time - epoch,
            remaining_s=self._remaining_s(job), attained_gpu_s=attained, preemptions=job.preemptions,
            placement=placement, last_run_s=max(0.0, last), queued_since=job.queued_since - epoch,
            estimate_s=job.spec.estimate_s, user=self._scoped(job, job.spec.user),
            group=self._scoped(job, job.spec.group), vc=self._scoped(job, job.spec.vc),
            topology=job.spec.topology, queue=job.spec.queue, priority=job.spec.priority,
        )

    def _known_or_isolate(self, job: JobRecord, placement: Placement | None, fabric: Fabric) -> KnownJob | None:
        """:meth:`_known`, or None after isolating the job when its numbers cannot be made into a
        view, or its topology request names levels ``fabric`` lacks (a job's data must not stop
        the tick; see the module doc)."""
        try:
            if not job.spec.topology.empty:
                job.spec.topology.check(fabric, job.spec.gpus, "its topology request")
            known = self._known(job, placement)
            for name in ("remaining_s", "attained_gpu_s", "last_run_s", "submit_time", "queued_since"):
                if not math.isfinite(getattr(known, name)):
                    raise ValueError(f"its {name} is {getattr(known, name)}")
        except DATA_ERRORS as exc:
            self._isolate(job, f"its view cannot be built ({first_line(exc)})", [])
            return None
        return known

    def _view(self, cluster: ClusterState, queued: Sequence[JobRecord], running: Sequence[JobRecord],
              link_load: Mapping[str, float] | None = None, learned: bool = True) -> ClusterView:
        """The policy's view; ``link_load`` as measured this tick, else asked of the agents. Its
        predictions come from the learned model when the loop learns (and ``learned``), else from
        the shipped contention model. Its ``restore_s`` and ``move_s`` are the defaults
        (:data:`~deepshare.core.view.DEFAULT_RESTORE_S`, :data:`~deepshare.core.view.DEFAULT_MOVE_S`):
        the scheduler has no setting for the restart time of a preempted or moved job
        (``preempt_grace_s`` bounds the checkpoint and exit)."""
        free = list(cluster.topology.capacity)
        known_running = []
        for job in running:
            assert job.placement is not None
            placement = cluster.to_placement(job.placement)
            if placement is None:  # its node left between reap and now; reaped next tick
                continue
            for node, g in placement.alloc:
                free[node] = max(0, free[node] - g)
            known = self._known_or_isolate(job, placement, cluster.topology.fabric)
            if known is not None:
                known_running.append(known)
        if link_load is None:
            link_load = self.link_load_fn() if self.link_load_fn is not None else {}
        contention = self.contention
        if self.learning is not None and learned:
            contention = self.learning.model(
                cluster.topology, [(j.job_id, j.model, j.gpus, j.placement) for j in known_running], link_load)
        return build_view(
            cluster.topology, self.catalog, contention, self.journal.now() - self.journal.epoch, free,
            [k for k in (self._known_or_isolate(j, None, cluster.topology.fabric) for j in queued) if k is not None],
            known_running,
            future_events=True, link_load=link_load,
            durations="estimated", history=self._read_history(), restore_s=DEFAULT_RESTORE_S,
            move_s=DEFAULT_MOVE_S,
        )

    def _read_history(self) -> JobHistory:
        """:attr:`history` with the jobs that finished since the last tick added (a journal
        read of only those: a long-lived scheduler's history is not re-read at every tick)."""
        epoch = self.journal.epoch
        for job in self.journal.finished(self._history_mark, HISTORY_WINDOW):
            run_s = job.attained_gpu_s / job.spec.gpus
            if run_s > 0 and job.finish_time is not None:
                spec = job.spec
                self.history.add(FinishedJob(job.job_id, spec.model, spec.gpus, run_s, job.finish_time - epoch,
                                             self._scoped(job, spec.user), self._scoped(job, spec.group),
                                             self._scoped(job, spec.vc), spec.estimate_s))
            if job.finish_time is not None:
                self._history_mark = (job.finish_time, job.seq)
        return self.history

    def predicted_throughput(self, model: str, placement: Placement, ratio: float) -> float:
        """What the simulator predicts for ``model`` at ``placement`` with contention ``ratio``."""
        return self.catalog.throughput(model, placement.total_gpus, placement.num_nodes) * ratio

    def _record_predictions(self, view: ClusterView, running: Sequence[JobRecord]) -> None:
        attempts = {j.job_id: j.attempt for j in running}
        for jv in view.running:
            assert jv.placement is not None
            predicted = self.predicted_throughput(jv.model, jv.placement, jv.ratio)
            self.journal.record_progress(jv.job_id, attempts[jv.job_id], None, None, None, predicted)

    def _record_shipped_predictions(self, cluster: ClusterState, running: Sequence[JobRecord]) -> None:
        """When the loop learns: each running job's predicted throughput from the shipped model
        (what the learned model is fitted against, as :meth:`_record_predictions` records without
        learning), recorded before the refit so that it pairs with this tick's measurements."""
        assert self.learning is not None
        placed = [(job, cluster.to_placement(job.placement)) for job in running if job.placement is not None]
        placed = [(job, p) for job, p in placed if p is not None]
        state = self.learning.prior_state(cluster.topology, ((j.job_id, j.spec.model, j.spec.gpus, p) for j, p in placed))
        for job, placement in placed:
            predicted = self.predicted_throughput(job.spec.model, placement, state.ratio(job.job_id))
            self.journal.record_progress(job.job_id, job.attempt, None, None, None, predicted)

    # -- applying a decision -------------------------------------------------------------------
    def _apply(self, decision: Decision, view: ClusterView, cluster: ClusterState,
               ended: list[tuple[str, str]]) -> TickReport:
        records = {j.job_id: j for j in self.journal.jobs(JobState.RUNNING, JobState.QUEUED)}
        # The API runs beside the policy: a job it decided on may have been cancelled (or ended)
        # since its view was built. Such a job is skipped here, before the journal changes; a
        # lookup that raised stopped the tick half-applied (runs journalled but never launched).
        asked = [*((j, "preempted") for j in decision.preempt), *((m.job_id, "migrating") for m in decision.migrate)]
        gone = sorted({job_id for job_id, _ in asked if job_id not in records})
        if gone:
            log.info("not stopping %s: no longer queued or running (cancelled or ended while the policy decided)", gone)
        stops = [(records[job_id], why) for job_id, why in asked if job_id in records]
        fresh = [(job.job_id, why) for job, why in stops if job.job_id not in self._stopping]  # a stopping run is not asked again
        if self.metrics is not None:
            self.metrics.preemptions.inc(sum(why == "preempted" for _, why in fresh))
            self.metrics.migrations.inc(sum(why == "migrating" for _, why in fresh))
        if stops:
            self._finish_stops(self._stop(stops), ended)
            # Predict the new runs against what still runs: the stopped jobs leave the contention
            # state (a migrating job would otherwise meet itself at its old place).
            view = self._view(cluster, self.journal.jobs(JobState.QUEUED), self.journal.jobs(JobState.RUNNING),
                              link_load=view.link_load)  # this tick's measurement: no second call to the agents
        views = {j.job_id: j for j in (*view.queued, *view.running)}
        # The journal records the shipped model's prediction (the learner's input), also when the
        # policy decided on the learned one.
        recorded = view if self.learning is None else self._view(
            cluster, self.journal.jobs(JobState.QUEUED), self.journal.jobs(JobState.RUNNING), link_load=view.link_load,
            learned=False)
        pending: list[tuple[JobView, Placement]] = []
        starts: list[tuple[JobRecord, int, tuple[tuple[str, int], ...]]] = []
        free = list(view.free)  # what runs now, stopping runs included, does not hold
        waiting = []
        journal_error: str | None = None
        for job_id, placement in [*((m.job_id, m.placement) for m in decision.migrate),
                                  *((l.job_id, l.placement) for l in decision.launch)]:
            jv = views.get(job_id)
            if jv is None:  # not in the view rebuilt after the stops: cancelled or ended since the decision
                log.info("not launching %s: no longer queued (cancelled or ended while the policy decided)", job_id)
                continue
            if job_id in self._stopping or not placement.fits(free):  # a stopping run still holds its GPUs
                waiting.append(job_id)
                continue
            placement.take(free)
            ratio = recorded.predict(jv, placement, tuple(pending)).ratio
            alloc = cluster.to_alloc(placement)
            predicted = self.predicted_throughput(jv.model, placement, ratio)
            try:
                attempt = self.journal.start_run(job_id, alloc, predicted)  # journalled before anything exists
            except TransitionError as exc:  # cancelled since the view was built: nothing to start
                log.info("not launching: %s", exc)
                continue
            except DATA_ERRORS as exc:  # its row was edited since it was read: the next read quarantines it
                log.error("not launching %s: its journal row cannot be read (%s)", job_id, exc)
                continue
            except sqlite3.OperationalError as exc:
                # Locked by another process (past SQLite's wait) or failing: no later start is tried
                # (each would wait again), and the runs journalled so far are still launched below
                # (raised, it would leave them journalled RUNNING, never launched: requeued as lost).
                journal_error = _starts_stopped(job_id, exc)
                break
            pending.append((jv, placement))
            try:
                record = self.journal.get(job_id)
            except (*DATA_ERRORS, sqlite3.OperationalError) as exc:
                # Its start is journalled but its record cannot be read back: it alone is left
                # journalled RUNNING without a run (the next tick requeues it as lost); the runs
                # journalled before it are still launched below, and no later start is tried.
                journal_error = _starts_stopped(job_id, exc)
                break
            starts.append((record, attempt, alloc))
        # Runs start concurrently: most of a launch is Ray starting worker processes.
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(starts)))) as pool:
            outcomes = list(pool.map(lambda s: self._launch(s[0], s[1], s[2], cluster), starts))
        launched = []
        for (job, attempt, alloc), failure in zip(starts, outcomes):
            if failure is None:
                launched.append(job.job_id)
                if self.metrics is not None:
                    self.metrics.launches.inc()
                continue
            self._launch_failed(job, attempt, alloc, failure, ended)
        if waiting:
            log.info("not launching %s this tick: runs asked to stop still hold their GPUs (%s)",
                     waiting, sorted(self._stopping))
        if journal_error is not None:
            self.last_error = journal_error
        return TickReport(decision, launched=tuple(launched),
                          preempted=tuple(job_id for job_id, why in fresh if why == "preempted"),
                          migrated=tuple(m.job_id for m in decision.migrate if m.job_id in launched), ended=tuple(ended),
                          error=journal_error)

    def _launch_failed(self, job: JobRecord, attempt: int, alloc: tuple[tuple[str, int], ...], failure: LaunchError,
                       ended: list[tuple[str, str]]) -> None:
        """Requeue the job after a failed launch, or fail it after ``max_launch_attempts`` in a row."""
        log.error("job %s: launch at %s failed: %s", job.job_id, alloc, failure)
        if self.metrics is not None:
            self.metrics.launch_failures.inc()
        if not failure.counts or self.journal.get(job.job_id).cancel_requested:  # (a requeue of a cancel cancels)
            prefix = "launch waited" if not failure.counts else LAUNCH_FAILED
            self.journal.end_run(job.job_id, attempt, JobState.QUEUED, f"{prefix}: {failure}")
        else:
            before, _ = self.journal.launch_failures(job.job_id)
            if before + 1 >= self.config.max_launch_attempts:
                error = f"launch failed {before + 1} time(s) in a row; last: {failure}"
                self.journal.end_run(job.job_id, attempt, JobState.FAILED, f"{LAUNCH_FAILED}: {failure}",
                                     error=error[-4000:])
            else:
                self.journal.end_run(job.job_id, attempt, JobState.QUEUED, f"{LAUNCH_FAILED}: {failure}")
        final = self.journal.get(job.job_id).state
        self._count_end(final)
        ended.append((job.job_id, final.value))

    def _launch(self, job: JobRecord, attempt: int, alloc: tuple[tuple[str, int], ...],
                cluster: ClusterState) -> LaunchError | None:
        """Create run ``attempt`` of ``job`` (already journalled); the error, or None when it started."""
        try:
            self.launcher.launch(job.job_id, attempt, job.spec, alloc, cluster, self.config.launch,
                                 job.spec.working_dir or self.working_dir)
        except LaunchError as exc:
            return exc
        return None

    # -- running -------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval_s`` until ``stop`` is set; a failing tick is logged, not fatal."""
        while not stop.is_set():
            started = time.perf_counter()
            try:
                report = self.tick()
                if report.error and self.metrics is not None:
                    self.metrics.tick_errors.inc()
                if report.launched or report.preempted or report.migrated or report.ended:
                    log.info("tick: launched %s preempted %s migrated %s ended %s", list(report.launched),
                             list(report.preempted), list(report.migrated), list(report.ended))
            except Exception as exc:  # noqa: BLE001 - keep scheduling; the journal is consistent
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("tick failed")
                if self.metrics is not None:
                    self.metrics.tick_errors.inc()
            if self.metrics is not None:
                self.metrics.tick_latency.observe(time.perf_counter() - started)
            self.ticks += 1
            stop.wait(self.config.interval_s)


@dataclass(frozen=True, slots=True)
class _Stopping:
    """A run asked to stop: which attempt, when it is removed if still going (monotonic
    seconds), and how it ends (``cancelled``, ``preempted``, ``migrating``)."""

    attempt: int
    deadline: float
    why: str


def _starts_stopped(job_id: str, exc: BaseException) -> str:
    """The tick's error when the journal failed at ``job_id``'s start (logged): its launch and
    the later ones wait for the next tick."""
    error = f"journal: {first_line(exc)}; launches after {job_id!r} wait for the next tick"
    log.error("not launching %s and the rest of this tick's launches: %s", job_id, error)
    return error
