"""``planner``: rollout-based policy improvement over the leading heuristics (slow).

At each decision point the planner asks a few *candidate* heuristics what they would do now (on
a flat cluster ``bsrsf+uncontended+preempt``, ``bsrsf+uncontended``, ``srsf+packed+preempt``,
``srsf+packed``; on a multi-level fabric ``srsf+topo-aware+preempt``, ``srsf+topo-bestfit+preempt``,
``srsf+topo-balanced+preempt``, ``srsf+topo-bestfit+backfill``, the last able to hold GPUs for a
gang). When they all agree it takes that decision at once. Otherwise it tries each distinct
decision on copies of the cluster (:meth:`Simulator.from_view`) over ``K`` sampled *futures*,
each copy going on under the *base* heuristic (the first candidate) for ``horizon_s`` seconds,
and takes the decision with the least mean cost (Bertsekas' rollout algorithm, one step). The
registered ``planner`` plays each copy to the end, without sampled arrivals
(:data:`SPEC_HORIZON`); :class:`PlannerConfig`'s own default is an hour with arrivals.

Cost of a rollout: the integral of jobs in the system from now to the horizon (the sum of the
JCTs accrued there) plus, for every job still in the system at the horizon, the work it has
left (seconds at its reference throughput): a lower bound on the time it will still spend in
the system, so that a decision that merely pushes work past the horizon gains nothing from it.

A *future* is what the view does not say, drawn from the belief the information model allows:

* the remaining work of every known job: the truth under ``exact`` (the view's own
  ``remaining_s``); under ``estimated`` and ``unknown`` a draw from the job's lognormal belief
  (:func:`deepshare.policies.posterior.belief`: its estimate and the history's forecast, as the
  ``bsrsf`` order reads them) conditioned on the job having run ``ran_s`` already;
* arrivals in ``(now, now + horizon_s]``: a Poisson process at the rate of the last
  ``window`` arrivals the planner has seen (the jobs of every view it was shown, by submit
  time; none before it has seen :data:`MIN_ARRIVALS`), measured over at least
  :data:`MIN_RATE_SPAN_S` and at most :data:`MAX_ARRIVALS` per future (a burst of submissions
  within moments, a trace's first second or a client's batch, would otherwise imply thousands a
  second and a future of millions of jobs), each a copy of one of those jobs' shape
  (model, GPUs, features, topology request, estimate) with a run time drawn as above (under
  ``exact``: the copied job's own, as first seen).

Every candidate is tried on the same futures (common random numbers); a future's draws depend
only on the seed, the view's time and its jobs' ids, so a decision is a function of what the
planner was shown and its seed. In a copy the base heuristic sees what it would see in the real
run: under ``estimated`` and ``unknown`` its views show the believed remaining time
(:func:`~deepshare.core.information.believed_remaining_s`), never the future's drawn truth, and
the jobs' real estimates; its history is the decision's, then the jobs the copy finishes, each
recorded with the estimate the real run shows (none under ``unknown``), as the real base learns
from the same completions (``bsrsf`` reads the history's forecasts). That is what the planner
simulated in that future, not a hidden truth. The copy's history is forked from the decision's
(:meth:`~deepshare.core.history.JobHistory.fork`): the beliefs the base computed are reused until
the copy's first completion. On the truth (the ceiling's future) the base's rollout is then the
base's real run, up to what a copy leaves out (:meth:`Simulator.from_view`).

The view is the information boundary: the planner reads the view's jobs, free GPUs, topology,
catalog, history, time and restore time, nothing else. The copies assume ``contention`` (a
model name; the planner cannot read the world's) and the default
:class:`~deepshare.core.simulator.SimConfig` (no rounds, 30 s migrations) but for restores: a
preempted job restarts after the view's ``restore_s``, the run's restore time.

Budget: ``budget_s`` seconds of wall time per decision. Futures are tried whole (every candidate
on future ``k`` before future ``k+1``); once the budget is spent no new rollout step is taken, a
future left incomplete is dropped, and the decision is taken on the futures done (the base's
decision when none is). A decision overruns the budget by at most one step of a rollout (one
base decision in a copy), plus asking the candidates and sampling a future. Without a budget,
and without a caller's deadline reached, the decision is deterministic.

A caller's deadline (the placement service's, the live scheduler's) bounds a decision the same
way: the planner spends :data:`DEADLINE_SHARE` of the time its caller says is left
(:func:`~deepshare.core.interrupt.time_left`) and answers on the futures done, rather than be
stopped and answer nothing. Its check (:func:`~deepshare.core.interrupt.checkpoint`, run at every
step of a rollout: the copies ask their own contention model, never the view's predictor, where
the service checks it otherwise) still stops a decision whose last step overruns the deadline.

``FutureModel`` is the one extension point: the clairvoyant ceiling (``bench/room.py``) runs the
same planner on the simulation's truth (true remaining work, the trace's real arrivals); it is
a measurement, never a policy a user can run.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

import numpy as np

from deepshare.core.bounds import MAX_DURATION_S
from deepshare.core.contention import make_contention
from deepshare.core.contention.base import ContentionModel
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.fabric import TopologyRequest
from deepshare.core.information import believed_remaining_s
from deepshare.core.interrupt import checkpoint, time_left
from deepshare.core.simulator import Simulator
from deepshare.core.topology import Topology
from deepshare.core.types import Decision, JobSpec
from deepshare.core.written import INTEGER, NUMBER
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.base import Policy
from deepshare.policies.posterior import belief, estimate_calibration, remaining_given_ran

FLAT_CANDIDATES = ("bsrsf+uncontended+preempt", "bsrsf+uncontended", "srsf+packed+preempt", "srsf+packed")
"""Candidates on a cluster whose fabric has one level: the loaded suite's preemptive and
non-preemptive leaders. The first is the base heuristic the rollouts go on under."""
FABRIC_CANDIDATES = ("srsf+topo-aware+preempt", "srsf+topo-bestfit+preempt", "srsf+topo-balanced+preempt",
                     "srsf+topo-bestfit+backfill")
"""Candidates on a multi-level fabric: the fabric suite's leader (topology-aware preemption with
the contention-aware choice), its BestFit and balanced siblings, and BestFit with an EASY
reservation (a gang that should wait for its domain)."""
MIN_ARRIVALS = 5
"""Arrivals the planner must have seen before it samples any (a rate from fewer is noise)."""
MIN_RATE_SPAN_S = 60.0
"""The least time the arrival rate is measured over: ``window`` arrivals submitted within a few
milliseconds give at most ``window / 60`` a second, not ``window / 0.001``."""
MAX_ARRIVALS = 10_000
"""The most arrivals one future holds, whatever the rate: a bound on its memory and on the work
of its rollouts."""
DEADLINE_SHARE = 0.8
"""The share of a caller's time left (the service's deadline, the live scheduler's) that a
decision spends rolling out; the rest covers the last rollout step, the choice and the answer."""
LEAST_REMAINING_S = 1.0
"""The least remaining work a draw gives a job (seconds)."""
_HORIZON_JOB = "planner-horizon"
"""After :func:`_reserved`'s prefix: a one-GPU job arriving at the horizon in every copy, a
decision point there to stop at and an event to come until then (so no copy stalls before it)."""
_NORMAL = statistics.NormalDist()


@dataclass(frozen=True)
class PlannerConfig:
    """The planner's knobs; every field has a default and a one-line meaning."""

    futures: int = 8
    """K: sampled futures per contested decision (one suffices, and one is used, when nothing is
    sampled: ``exact`` durations and no arrivals)."""
    budget_s: float | None = None
    """Wall-clock seconds per decision; None: no budget (deterministic, unless a caller's
    deadline cuts a decision short)."""
    horizon_s: float = 3600.0
    """How far each rollout simulates (and arrivals are sampled) past the decision."""
    max_steps: int = 400
    """Most decisions one rollout takes before it stops early (a bound on a decision's cost);
    the options of a future are then all judged up to the time the first of them stopped at."""
    contention: str = "profiled"
    """The contention model the copies simulate (:func:`~deepshare.core.contention.make_contention`)."""
    candidates: tuple[str, ...] | None = None
    """Registered heuristic names (a list is kept as a tuple); the first is the base. None:
    :data:`FLAT_CANDIDATES` or :data:`FABRIC_CANDIDATES` by the view's fabric. Their form is
    checked here; that each names a policy, when a :class:`Planner` is built (by its factory,
    which may know names the registry does not)."""
    arrivals: bool = True
    """Sample arrivals from the past (False: only the jobs in the view)."""
    window: int = 200
    """Most recent arrivals the arrival rate and the shapes come from."""
    seed: int = 0
    """Seeds the futures' draws (a non-negative integer)."""

    def __post_init__(self) -> None:
        if isinstance(self.futures, bool) or not isinstance(self.futures, int) or not 1 <= self.futures <= 10_000:
            raise DeepShareError(f"planner: futures must be an integer from 1 to 10000, got {shown(self.futures)}")
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not (
                isinstance(self.budget_s, (int, float)) and 0 < self.budget_s < math.inf)):
            raise DeepShareError(f"planner: budget must be a positive number of seconds, got {self.budget_s!r}")
        if isinstance(self.horizon_s, bool) or not (isinstance(self.horizon_s, (int, float))
                                                    and 0 < self.horizon_s <= MAX_DURATION_S):
            raise DeepShareError(f"planner: horizon_s must be positive seconds up to a year, got {self.horizon_s!r}")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise DeepShareError(f"planner: max_steps must be a positive integer, got {self.max_steps!r}")
        if self.candidates is not None:
            if not isinstance(self.candidates, (tuple, list)):  # a string would be taken one character a name
                raise DeepShareError(f"planner: candidates must be a tuple of policy names, got {self.candidates!r}")
            if not self.candidates:
                raise DeepShareError("planner: candidates must name at least one heuristic")
            wrong = [name for name in self.candidates if not isinstance(name, str) or not name.strip()]
            if wrong:
                raise DeepShareError(f"planner: candidates must be policy names, got {wrong[0]!r} among them")
            object.__setattr__(self, "candidates", tuple(self.candidates))  # hashable: the candidates' cache key
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise DeepShareError(f"planner: seed must be a non-negative integer, got {self.seed!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < MIN_ARRIVALS:
            raise DeepShareError(f"planner: window must be an integer of at least {MIN_ARRIVALS}, got {self.window!r}")
        try:  # an unknown name is refused now, not at the first decision
            make_contention(self.contention)
        except DeepShareError as exc:
            raise DeepShareError(f"planner: contention {shown(self.contention)}: {exc}") from None


END_STEPS = 1_000_000
"""The step bound of a rollout under ``HORIZON`` ``end`` (far past any bundled trace's decisions)."""
SPEC_HORIZON = "end"
"""The horizon of a spec that names none (``planner``, ``planner=16``): rollouts to the end, no
sampled arrivals. It judges each option by its whole cost-to-go and measured better than the
hour (:class:`PlannerConfig`'s own default, the form with sampled arrivals) on the ``fabric``
and ``tenants-learned`` cells (CHANGELOG.md)."""
_PLANNER_SYNTAX = "K[:BUDGET_S[:CONTENTION[:HORIZON]]]"


def parse_argument(arg: str) -> PlannerConfig:
    """``K[:BUDGET[:CONTENTION[:HORIZON]]]`` (``planner=16:5:link:3600``); an empty or ``none``
    budget is none. ``HORIZON``: seconds each rollout looks ahead (arrivals sampled up to it, at
    most :attr:`PlannerConfig.max_steps` decisions), or ``end`` (:data:`SPEC_HORIZON`, the
    default): each rollout plays the base until the view's jobs have all finished, with no sampled
    arrivals (a year of them would never end)."""
    parts = arg.split(":")
    named = f"planner={arg if len(arg) <= 100 else shown(arg)}"  # as typed; a name of megabytes cut short
    if len(parts) > 4:
        raise DeepShareError(f"{named}: expected {_PLANNER_SYNTAX}, e.g. planner=16:5:link or planner=16::link:3600")
    horizon = parts[3] if len(parts) > 3 and parts[3] else SPEC_HORIZON
    budget_text = parts[1] if len(parts) > 1 and parts[1] not in ("", "none") else None
    # ASCII only: int() and float() also read 1_6 as 16 and other scripts' digits, spaces around them too
    if not ((not parts[0] or INTEGER.fullmatch(parts[0])) and (budget_text is None or NUMBER.fullmatch(budget_text))
            and (horizon == "end" or NUMBER.fullmatch(horizon))):
        raise DeepShareError(f"{named}: expected {_PLANNER_SYNTAX} with K an integer, BUDGET_S seconds and "
                             "HORIZON seconds or 'end', e.g. planner=16:5:link:7200")
    try:
        futures = int(parts[0]) if parts[0] else PlannerConfig.futures
    except ValueError:  # past Python's 4,300-digit limit for int()
        raise DeepShareError(f"{named}: K must be an integer from 1 to 10000") from None
    budget = float(budget_text) if budget_text is not None else None
    horizon_s = None if horizon == "end" else float(horizon)
    contention = parts[2] if len(parts) > 2 and parts[2] else PlannerConfig.contention
    config = PlannerConfig(futures=futures, budget_s=budget, contention=contention)
    if horizon_s is None:
        return replace(config, horizon_s=MAX_DURATION_S, max_steps=END_STEPS, arrivals=False)
    if not math.isfinite(horizon_s):  # "inf" and "nan" parse as floats
        raise DeepShareError(f"{named}: HORIZON must be seconds up to a year or 'end', got {shown(horizon)}")
    return replace(config, horizon_s=horizon_s)


@dataclass(frozen=True)
class Future:
    """One sampled (or, for the ceiling, true) future of a decision point."""

    remaining_s: dict[str, float]
    """Each known job's remaining work, seconds at its reference throughput."""
    arrivals: tuple[JobSpec, ...]
    """Jobs submitted after the view's time (their ``requested_s``: the estimate they come with)."""


class FutureModel(Protocol):
    """Where a planner's futures come from. One model may serve concurrent decisions (the
    placement service's decision threads share the policy): it must be safe to call from
    several threads at once."""

    def observe(self, view: ClusterView) -> bool:
        """Called with every view the planner decides on, before :meth:`sample`; whether every
        future of ``view`` is the same (one rollout per candidate is then enough)."""

    def sample(self, view: ClusterView, horizon_end: float, rng: np.random.Generator) -> Future:
        """A future of ``view`` up to ``horizon_end``."""


@dataclass(frozen=True, slots=True)
class _Shape:
    """A job as the planner saw it arrive: what a sampled arrival copies."""

    submit_time: float
    model: str
    gpus: int
    size_s: float | None
    """Its whole isolated run time as first seen (``exact`` only: the view's remaining + ran)."""
    estimate_s: float | None
    user: str | None
    group: str | None
    vc: str | None
    topology: TopologyRequest
    queue: str | None
    priority: str | None


class BeliefFutures:
    """Futures drawn from what the view allows (see the module doc). The arrivals seen are
    shared by every decision (a service's concurrent requests too) under a lock."""

    def __init__(self, arrivals: bool = True, window: int = 200) -> None:
        self.arrivals, self.window = arrivals, window
        self._seen: dict[str, _Shape] = {}
        self._lock = threading.Lock()

    def observe(self, view: ClusterView) -> bool:
        exact = view.durations == "exact"
        shapes = [(job.job_id, _Shape(job.submit_time, job.model, job.gpus, job.remaining_s + job.ran_s if exact else None,
                                      job.estimate_s, job.user, job.group, job.vc, job.topology, job.queue,
                                      job.priority))
                  for job in (*view.queued, *view.running) if job.job_id not in self._seen]
        with self._lock:
            seen = self._seen
            for job_id, shape in shapes:
                seen.setdefault(job_id, shape)  # another decision may have added it since: the first stays
            if len(seen) > 4 * self.window:  # keep the most recent arrivals only
                keep = sorted(seen.items(), key=lambda item: item[1].submit_time)[-2 * self.window:]
                self._seen = dict(keep)
        return exact and not self._recent(view.now)

    def _recent(self, now: float) -> list[_Shape]:
        """The window's arrivals (at or before ``now``), oldest first; empty below MIN_ARRIVALS."""
        if not self.arrivals:
            return []
        with self._lock:
            shapes = list(self._seen.values())
        past = sorted((s for s in shapes if s.submit_time <= now), key=lambda s: s.submit_time)
        past = past[-self.window:]
        return past if len(past) >= MIN_ARRIVALS and now > past[0].submit_time else []

    def sample(self, view: ClusterView, horizon_end: float, rng: np.random.Generator) -> Future:
        durations, history = view.durations, view.history
        calibration = None if durations == "exact" else estimate_calibration(history)
        known = sorted((*view.queued, *view.running), key=lambda j: j.job_id)
        remaining: dict[str, float] = {}
        for job in known:
            if durations == "exact":
                remaining[job.job_id] = job.remaining_s
            else:
                mu, sigma = belief(job, history, calibration)
                remaining[job.job_id] = _draw_remaining(mu, sigma, job.ran_s, float(rng.random()))
        arrivals: list[JobSpec] = []
        prefix = _reserved(view)
        recent = self._recent(view.now)
        if recent:
            rate = (len(recent) - 1) / max(view.now - recent[0].submit_time, MIN_RATE_SPAN_S)
            t = view.now
            while rate > 0 and len(arrivals) < MAX_ARRIVALS:
                checkpoint()
                t += float(rng.exponential(1.0 / rate))
                if t >= horizon_end:
                    break
                shape = recent[int(rng.integers(len(recent)))]
                estimate = shape.estimate_s if durations == "estimated" else None
                if durations == "exact" and shape.size_s is not None:
                    duration = shape.size_s
                else:
                    probe = JobView(f"{prefix}a{len(arrivals)}", shape.model, shape.gpus, t, 0.0, 0.0, "", estimate_s=estimate,
                                    user=shape.user, group=shape.group, vc=shape.vc)
                    mu, sigma = belief(probe, history, calibration)
                    duration = _draw_remaining(mu, sigma, 0.0, float(rng.random()))
                arrivals.append(JobSpec(f"{prefix}a{len(arrivals)}", shape.model, shape.gpus, t,
                                        duration_s=min(max(duration, LEAST_REMAINING_S), MAX_DURATION_S),
                                        user=shape.user, group=shape.group, vc=shape.vc, requested_s=estimate,
                                        topology=shape.topology, queue=shape.queue, priority=shape.priority))
        return Future(remaining, tuple(arrivals))


def _draw_remaining(mu: float, sigma: float, ran_s: float, u: float) -> float:
    """A draw of ``D - ran`` for ``log D ~ N(mu, sigma^2)`` conditioned on ``D > ran`` (inverse CDF
    at ``u``), in ``[LEAST_REMAINING_S, MAX_DURATION_S]``; the conditional mean when the belief
    puts almost no mass past ``ran`` (the job has outlived it)."""
    low = _NORMAL.cdf((math.log(ran_s) - mu) / sigma) if ran_s > 0 else 0.0
    if low > 1 - 1e-9:
        left = remaining_given_ran(mu, sigma, ran_s)
    else:
        p = min(max(low + (1 - low) * u, 1e-12), 1 - 1e-12)
        log_d = mu + sigma * _NORMAL.inv_cdf(p)
        left = (math.exp(log_d) if log_d < math.log(MAX_DURATION_S) else MAX_DURATION_S) - ran_s
    return min(max(left, LEAST_REMAINING_S), MAX_DURATION_S)


def decision_key(decision: Decision) -> tuple:
    """A decision's identity regardless of the order of its parts."""
    return (tuple(sorted((launch.job_id, launch.placement.alloc) for launch in decision.launch)),
            tuple(sorted(decision.preempt)),
            tuple(sorted((m.job_id, m.placement.alloc) for m in decision.migrate)))


@dataclass
class PlannerStats:
    """What the planner did so far (for benchmarks, tests and the service's logs). Counted under a
    lock: the service's decision threads decide with one planner at once, and ``+=`` on an
    attribute is not atomic across threads."""

    decisions: int = 0
    contested: int = 0
    """Decisions where the candidates disagreed."""
    changed: int = 0
    """Contested decisions where it took another decision than the base's."""
    futures: int = 0
    """Futures tried, summed over contested decisions."""
    rollouts: int = 0
    budget_hits: int = 0
    """Decisions cut short by the budget or a caller's deadline."""
    last_futures: int = 0
    """Futures the last contested decision was taken on."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add ``counts`` to the named counters, at once."""
        with self._lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)

    def taken_on(self, futures: int) -> None:
        """A contested decision was taken on ``futures`` futures."""
        with self._lock:
            self.futures += futures
            self.last_futures = futures


class Planner:
    """The rollout planner (see the module doc). ``make``: builds a registered policy by name
    (:func:`deepshare.policies.make_policy`; passed in, since the registry registers the planner);
    ``futures_model``: where futures come from (default :class:`BeliefFutures`, what the view allows)."""

    def __init__(self, config: PlannerConfig, make: Callable[[str], Policy], name: str = "planner",
                 futures_model: FutureModel | None = None, contention: ContentionModel | None = None) -> None:
        self.name, self.config = name, config
        self.futures_model: FutureModel = futures_model or BeliefFutures(config.arrivals, config.window)
        self.contention = make_contention(config.contention) if contention is None else contention
        """What the copies simulate: the model ``config.contention`` names, or ``contention`` (a
        model object no name builds: the clairvoyant ceiling's copies run the simulation's own
        world, a perturbed one included)."""
        self._make = make
        self._candidates: dict[tuple[str, ...], list[Policy]] = {}
        if config.candidates is not None:  # an unknown name is refused now, by the factory that builds them
            try:
                self._candidates[config.candidates] = [make(name) for name in config.candidates]
            except DeepShareError as exc:
                raise DeepShareError(f"planner: candidates {config.candidates!r}: {exc}") from None
        self.stats = PlannerStats()

    def around_candidates(self, wrap: Callable[[Policy], Policy]) -> "Planner":
        """This planner with ``wrap`` around each candidate it builds (the bases of its copies too),
        not around itself: how a tenants file's admission reaches it
        (:func:`deepshare.tenants.admitted`). Admission around the planner would show it only the
        admitted jobs and leave its copies without admission, planning a world unlike the real
        one; around its candidates, every option it weighs, and every copy's base, is admitted as
        the real run is. For a planner that has not decided yet (the result shares its futures)."""
        make = self._make
        return Planner(self.config, lambda name: wrap(make(name)), self.name, self.futures_model, self.contention)

    def candidate_names(self, topology: Topology) -> tuple[str, ...]:
        """The candidates on ``topology`` (the first is the base): the configured ones, else
        :data:`FABRIC_CANDIDATES` on a fabric of several levels, :data:`FLAT_CANDIDATES` otherwise."""
        if self.config.candidates is not None:
            return self.config.candidates
        return FABRIC_CANDIDATES if len(topology.fabric.levels) > 1 else FLAT_CANDIDATES

    def decide(self, view: ClusterView) -> Decision:
        budget_end = _rollouts_end(time.perf_counter(), self.config.budget_s)  # before the candidates: they spend it too
        self.stats.add(decisions=1)
        deterministic = self.futures_model.observe(view)
        if not isinstance(deterministic, bool):  # an old-style model (a ``deterministic`` attribute) must say so
            raise TypeError(f"{type(self.futures_model).__name__}.observe must return a bool (whether every future of "
                            f"the view is the same), got {deterministic!r}")
        names = self.candidate_names(view.topology)
        policies = self._candidates.get(names)
        if policies is None:
            policies = self._candidates[names] = [self._make(name) for name in names]
        options: dict[tuple, Decision] = {}
        for policy in policies:
            decision = policy.decide(view)
            options.setdefault(decision_key(decision), decision)
        choices = list(options.values())  # the base's first: it wins ties
        if len(choices) == 1:
            return choices[0]
        self.stats.add(contested=1)
        config = self.config
        horizon_end = view.now + config.horizon_s
        totals = [0.0] * len(choices)
        done = 0
        futures = 1 if deterministic else config.futures
        for k in range(futures):
            rng = np.random.default_rng([config.seed, _view_hash(view), k])
            try:
                future = self.futures_model.sample(view, horizon_end, rng)
                start = _future_view(view, future)
            except DeepShareError:  # a future outside the documented domain (times past the bounds): none
                break
            costs = self._judged(start, choices, future, horizon_end, names[0], view.durations, budget_end)
            if len(costs) < len(choices):
                self.stats.add(budget_hits=1)
                break
            for i, cost in enumerate(costs):
                totals[i] += cost
            done += 1
        self.stats.taken_on(done)
        if done == 0:
            return choices[0]
        best = min(range(len(choices)), key=lambda i: (totals[i], i))
        if not _improves(totals[best], totals[0]):
            best = 0
        self.stats.add(changed=int(best != 0))
        return choices[best]

    def _judged(self, start: ClusterView, choices: list[Decision], future: Future, horizon_end: float,
                base_name: str, durations: str, budget_end: float | None) -> list[float]:
        """Each option's cost in one future, all over one window: when a rollout stops at
        :attr:`PlannerConfig.max_steps` decisions before the horizon, every option that went past
        that time is played again to it (a rollout cut by its own count was judged over a window
        of its own, and the option with the more decision points stopped first: 43 of 314
        contested choices flipped on small traces). Fewer costs than options: the budget ran out
        (the future is dropped)."""
        rolled: list[tuple[float, float | None]] = []
        for decision in choices:
            if budget_end is not None and time.perf_counter() >= budget_end:
                break  # this future is left incomplete: dropped, the decision is taken on the others
            one = self._rollout(start, decision, future, horizon_end, base_name, durations, budget_end=budget_end)
            if one is None:  # the budget ran out inside the rollout: the same
                break
            rolled.append(one)
        costs = [cost for cost, _ in rolled]
        cut = min((at for _, at in rolled if at is not None), default=None)
        if len(rolled) < len(choices) or cut is None:
            return costs
        for i, (decision, (_, at)) in enumerate(zip(choices, rolled)):
            if at == cut:  # a copy that failed is played again too: before the cut it fails again,
                continue   # after it the others were stopped before they could fail alike
            if budget_end is not None and time.perf_counter() >= budget_end:
                return costs[:i]
            again = self._rollout(start, decision, future, cut, base_name, durations, budget_end=budget_end)
            if again is None:
                return costs[:i]
            costs[i] = again[0]
        return costs

    def _rollout(self, start: ClusterView, decision: Decision, future: Future, horizon_end: float, base_name: str,
                 durations: str, *, budget_end: float | None = None) -> tuple[float, float | None] | None:
        """The cost of ``decision`` in one future (infinite when the copy cannot go on), and the
        time it stopped at if :attr:`PlannerConfig.max_steps` stopped it before ``horizon_end``
        (else None); None when ``budget_end`` (a ``perf_counter`` time) passes before the rollout
        ends. The copy goes on from the decision's history (``start.history``) and adds the jobs
        it finishes to it, with the estimates the real run shows (:func:`_estimates`): its base
        learns from them as the real base would from the same completions."""
        self.stats.add(rollouts=1)
        checkpoint()
        base = self._make(base_name)
        estimates = None if durations == "exact" else _estimates(start, future, durations)
        memo: dict[int, tuple[JobView, JobView]] = {}
        try:
            horizon_job = _reserved(start) + _HORIZON_JOB
            sentinel = JobSpec(horizon_job, _sentinel_model(start), 1, horizon_end, duration_s=1.0)
            copy = Simulator.from_view(start, self.contention, future=[*future.arrivals, sentinel])  # restores at start.restore_s
            copy.history = start.history.fork(estimates)  # what it learned so far, kept (most of a rollout's cost)
            if copy.advance() is None:
                return copy.jobs_in_system_area, None
            copy.apply(decision)
            steps = 0
            while (view := copy.advance()) is not None:
                if view.now >= horizon_end or steps >= self.config.max_steps:
                    left = sum(j.remaining_s for j in (*view.queued, *view.running) if j.job_id != horizon_job)
                    return copy.jobs_in_system_area + left, (view.now if view.now < horizon_end else None)
                checkpoint()  # a caller's deadline (the service's, the scheduler's) stops a long rollout between its decisions
                if budget_end is not None and time.perf_counter() >= budget_end:
                    return None
                seen = view if estimates is None else _believed(view, durations, estimates, memo)
                copy.apply(base.decide(seen))
                steps += 1
            return copy.jobs_in_system_area, None
        except DeepShareError:  # a decision whose copy stalls or cannot go on is no option
            return math.inf, None


def _improves(total: float, base_total: float) -> bool:
    """Whether an option's total cost beats the base's by more than rounding: a relative 1e-9 of a
    finite base; any finite total beats an infinite one (the base's copies stalled: no option),
    where the tolerance would be ``inf - inf``, nan, and nothing would ever beat it."""
    if not math.isfinite(base_total):
        return total < base_total
    return total < base_total - 1e-9 * max(1.0, abs(base_total))


def _reserved(view: ClusterView) -> str:
    """The prefix of the ids a copy gives the jobs it makes up (sampled arrivals, the horizon's
    marker): ``~``, or as many more as it takes that no job of the view's id starts with it. A
    real job called ``~a0`` made every copy refuse a duplicate id, every option cost inf and
    the planner silently keep its base."""
    prefix = "~"
    ids = [j.job_id for j in (*view.queued, *view.running) if j.job_id.startswith("~")]
    while any(i.startswith(prefix) for i in ids):
        prefix += "~"
    return prefix


def _sentinel_model(view: ClusterView) -> str:
    """The model of the horizon's marker job: a known job's (the simulator has resolved it), else
    the catalog's first. Not a queued job's only: the live scheduler decides with an empty queue
    while jobs run, and candidates that migrate or preempt can disagree there."""
    for job in (*view.queued, *view.running):
        return job.model
    return view.catalog.models[0]


def _rollouts_end(started: float, budget_s: float | None) -> float | None:
    """The ``perf_counter`` time a decision starting now (at ``started``) stops rolling out: its
    budget's end, or :data:`DEADLINE_SHARE` of the time its caller gives it
    (:func:`~deepshare.core.interrupt.time_left`) if sooner; None when neither bounds it."""
    ends = [] if budget_s is None else [started + budget_s]
    left = time_left()
    if left is not None:
        ends.append(started + DEADLINE_SHARE * max(0.0, left))
    return min(ends) if ends else None


def _view_hash(view: ClusterView) -> int:
    """A stable hash of what identifies a decision point: its time and its jobs."""
    text = repr(view.now) + "|" + ",".join(sorted(j.job_id for j in view.queued)) + "|" + ",".join(
        sorted(j.job_id for j in view.running))
    return zlib.crc32(text.encode())


def _future_view(view: ClusterView, future: Future) -> ClusterView:
    """``view`` with its jobs' remaining work set to the future's: what a copy starts from."""
    left = future.remaining_s

    def one(job: JobView) -> JobView:
        return replace(job, remaining_s=left.get(job.job_id, job.remaining_s))

    return replace(view, queued=tuple(map(one, view.queued)), running=tuple(map(one, view.running)), durations="exact")


def _estimates(view: ClusterView, future: Future, durations: str) -> dict[str, float | None]:
    """The estimate every job of a copy shows the base heuristic and is recorded with when it
    finishes there (none under ``unknown``): the view's for its jobs, the future's for arrivals."""
    if durations == "unknown":
        return {}
    found: dict[str, float | None] = {j.job_id: j.estimate_s for j in (*view.queued, *view.running)}
    found.update((spec.job_id, spec.requested_s) for spec in future.arrivals)
    return found


def _believed(view: ClusterView, durations: str, estimates: dict[str, float | None],
              memo: dict[int, tuple[JobView, JobView]]) -> ClusterView:
    """A copy's view as the real run would show it: believed remaining times, real estimates,
    and the copy's own history (the decision's, then the jobs the copy finished, with their real
    estimates: what the real base would have learned by then in this future). ``memo``: the
    believed view of each job view already seen in this copy (a queued job's view is the same
    object from decision to decision), by identity."""

    def one(job: JobView) -> JobView:
        found = memo.get(id(job))
        if found is not None and found[0] is job:
            return found[1]
        estimate = estimates.get(job.job_id)
        seen = JobView(job.job_id, job.model, job.gpus, job.submit_time, believed_remaining_s(estimate, job.ran_s),
                       job.attained_gpu_s, job.comm_class, job.preemptions, job.placement, job.ratio,
                       job.last_run_s, job.queued_since, estimate, job.user, job.group, job.vc, job.topology,
                       job.queue, job.priority)
        if job.placement is None:
            memo[id(job)] = (job, seen)
        return seen

    return replace(view, queued=tuple(map(one, view.queued)), running=tuple(map(one, view.running)),
                   durations=durations)
