"""Expert iteration: the network acts, the rollout planner labels the states it visits (DAgger).

Issue 37 asks for training that can beat its teacher: the planner (:mod:`deepshare.policies.planner`,
slow) is the teacher, the candidate scorer the student, and the planner's rollouts, the
expensive part, run as Ray tasks across a cluster when there is one.

1. :func:`visit` plays :class:`~deepshare.rl.env.DeepShareEnv` episodes (training seeds, below the
   suite's 2^31) driven by the anchor heuristic (round 0) or by a fitted scorer (later rounds).
   At every choice it keeps the observation, the offered rows and the launches already made in
   the decision being built; at every decision point it keeps a :class:`LabelState`: what the
   point's view shows, detached from the simulator (it pickles, and :meth:`LabelState.view`
   rebuilds the same view, predictions included, wherever it runs), plus the jobs seen so far
   in the episode (what the planner's arrival model learns from).
2. :func:`label_states` asks the planner for its whole :class:`~deepshare.core.types.Decision` on
   each state: in this process, or as ``ray.remote`` tasks (``num_cpus`` each, fractional allowed)
   when this process is connected to Ray. Each state is decided by a fresh planner primed with
   that state's seen jobs, and the planner's futures are seeded by the view's hash, so a state's
   label is a function of the state and the planner's config: the same wherever and in whatever
   order it is computed (``tests/rl/test_expert.py`` checks Ray's against the local ones), unless
   the config has a time budget (``budget_s``, ``planner=K:BUDGET_S``): the futures a decision
   samples then depend on the labelling machine's speed, and ``expert.json`` records
   ``deterministic_labels: false``.
3. :func:`label_choices` turns decisions into row labels: at a choice, the planner's next launch
   (in its decision's order) of a job the partial decision has not launched, matched to a row by
   job id and allocation (as :func:`~deepshare.rl.imitate.anchor_action` matches the anchor's);
   wait when the planner launches nothing more. A choice is skipped, and counted, when the
   planner's launch is not among the offered rows, when its decision preempts or migrates (the
   rows cannot express it), or when it says wait where waiting is masked. A teacher whose
   candidates are non-preemptive (``PlannerConfig.candidates``, ``--teacher-candidates``) makes
   every decision expressible, and its rollouts go on under a base the network can follow.
4. :func:`expert_iteration` runs the rounds (round 0: the anchor's episodes; round r: the scorer
   fitted so far drives, the planner labels), aggregates every round's labelled choices and
   refits with :func:`~deepshare.rl.imitate.fit`, and exports ``OUT/policy.pt`` (its metadata
   names the teacher, rounds, episodes and label coverage) and ``OUT/expert.json``.

The information boundary: a label is computed on what the view at that choice shows under the
episode's information model (believed remaining work under ``estimated``, the history of
finished jobs, the predictions of the contention model the policy knows), never on the
simulator's truths; :class:`LabelState` holds nothing else, so no hidden truth can reach a label.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from deepshare.core.atomic import write_text_atomic
from deepshare.core.contention import ContentionModel
from deepshare.core.errors import DeepShareError
from deepshare.core.history import JobHistory
from deepshare.core.json_text import json_text
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import Topology
from deepshare.core.types import Decision
from deepshare.core.view import DEFAULT_MOVE_S, DEFAULT_RESTORE_S, NO_TENANCY, ClusterView, JobView
from deepshare.core.workloads import Catalog
from deepshare.policies.encoding import WAIT_INDEX
from deepshare.policies.learned import best_row
from deepshare.policies.planner import BeliefFutures, Planner, PlannerConfig
from deepshare.policies.teacher_spec import TEACHER_FORM, parse_teacher  # noqa: F401 (re-exported: the CLI and tests name them here)
from deepshare.rl.env import DeepShareEnv, EnvConfig
from deepshare.rl.imitate import SUITE_SEED_BASE, Demonstrations, FitSettings, anchor_action, collect, fit, learner_gap

# -- states a labeller elsewhere can decide on -----------------------------------------------------
@dataclass(frozen=True)
class LabelState:
    """A decision point as a labeller needs it: everything its view shows, detached from the
    simulator, and the jobs seen in the episode up to it. Pickles (Ray ships it to a task);
    :meth:`view` rebuilds the view with :func:`~deepshare.core.snapshot.build_view`, whose
    predictor is a fresh contention state of the running jobs (the same answers as the
    simulator's, checked by :func:`detach`).

    A simulator's :class:`ClusterView` cannot itself travel: its queue, running jobs, history and
    predictor are live links into the simulator, which moves on after the decision."""

    now: float
    topology: Topology
    catalog: Catalog
    contention: ContentionModel
    """The world's contention model (the simulator's own), which the view's predictions answer
    from: the policy's knowledge of contention only under ``exact`` contention knowledge, the only
    one :meth:`~deepshare.rl.env.DeepShareEnv.episode_contention` hands out (it refuses an
    episode whose contention is learned, whose views predict from the learned model)."""
    free: tuple[int, ...]
    queued: tuple[JobView, ...]
    running: tuple[JobView, ...]
    future_events: bool
    link_load: tuple[tuple[str, float], ...]
    durations: str
    history: JobHistory
    """A copy of the finished jobs at the decision (the simulator's history keeps growing)."""
    seen: tuple[JobView, ...]
    """The episode's jobs as first seen at this or an earlier decision point, the most recent
    ``window`` by submit time in first-seen order: what the planner's arrival model would have
    learnt from, had it been shown every view of the episode up to here."""
    restore_s: float = DEFAULT_RESTORE_S
    """The view's restore time of a preempted job (what preemptive teachers cost a stop at)."""
    move_s: float = DEFAULT_MOVE_S
    """The view's restart time of a migrated job (what ``+migrate`` teachers cost a move at)."""

    def view(self) -> ClusterView:
        return build_view(self.topology, self.catalog, self.contention, self.now, self.free,
                          [_known(j) for j in self.queued], [_known(j) for j in self.running],
                          future_events=self.future_events, link_load=dict(self.link_load),
                          durations=self.durations, history=self.history.copy(), restore_s=self.restore_s,
                          move_s=self.move_s)


def _known(job: JobView) -> KnownJob:
    return KnownJob(job.job_id, job.model, job.gpus, job.submit_time, job.remaining_s, job.attained_gpu_s,
                    job.preemptions, job.placement, job.last_run_s, job.queued_since, job.estimate_s, job.user,
                    job.group, job.vc, job.topology, job.queue, job.priority)


class SeenJobs:
    """The jobs of one episode as first seen, in first-seen order (a planner shown every view
    keeps the same; see :class:`~deepshare.policies.planner.BeliefFutures`)."""

    def __init__(self) -> None:
        self._first: dict[str, JobView] = {}

    def observe(self, view: ClusterView) -> None:
        first = self._first
        for job in (*view.queued, *view.running):
            if job.job_id not in first:
                first[job.job_id] = job

    def recent(self, window: int) -> tuple[JobView, ...]:
        """The ``window`` most recent by submit time (ties: first seen first), in first-seen order:
        the planner reads only those (its arrival rate and shapes)."""
        jobs = list(self._first.values())
        if len(jobs) <= window:
            return tuple(jobs)
        keep = set(sorted(range(len(jobs)), key=lambda i: jobs[i].submit_time)[-window:])
        return tuple(job for i, job in enumerate(jobs) if i in keep)


def detach(view: ClusterView, contention: ContentionModel, seen: tuple[JobView, ...] = (), check: bool = True) -> LabelState:
    """``view`` as a :class:`LabelState`; with ``check``, raises RuntimeError unless the rebuilt
    view shows the same jobs (running ratios included) and free GPUs."""
    if view.tenancy is not NO_TENANCY:
        raise DeepShareError("expert iteration: views with tenancy (a tenants file) cannot be labelled yet")
    state = LabelState(view.now, view.topology, view.catalog, contention, tuple(view.free), tuple(view.queued),
                       tuple(view.running), view.future_events, tuple(sorted(view.link_load.items())),
                       view.durations, view.history.copy(), seen, view.restore_s, view.move_s)
    if check:
        again = state.view()
        if again.queued != state.queued or again.running != state.running or again.free != state.free:
            raise RuntimeError(f"the view at t={view.now} does not rebuild to itself (contention {contention.name!r})")
    return state


# -- labelling: here or as Ray tasks ----------------------------------------------------------------
def planner_decisions(states: Sequence[LabelState], config: PlannerConfig) -> list[Decision]:
    """The planner's decision on each state, each by a fresh planner that has seen the state's
    ``seen`` jobs (the body of a labelling task; in-process too)."""
    from deepshare.policies import make_policy

    decisions = []
    for state in states:
        futures = BeliefFutures(config.arrivals, config.window)
        view = state.view()
        if state.seen:
            futures.observe(replace(view, queued=state.seen, running=()))
        decisions.append(Planner(config, make_policy, futures_model=futures).decide(view))
    return decisions


def ray_connected() -> bool:
    """Whether this process is connected to Ray (never imports it when nothing has)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def label_states(
    states: Sequence[LabelState], config: PlannerConfig, *, on_ray: bool | None = None, num_cpus: float = 1.0,
    tasks_per_slot: int = 4,
) -> list[Decision]:
    """The planner's decision on each state, in order: as Ray tasks of ``num_cpus`` each when
    ``on_ray`` (None: when this process is connected to Ray), else here. On Ray the states are
    dealt round-robin into about ``tasks_per_slot`` tasks per slot of the cluster (its CPUs over
    ``num_cpus``), so the costly contested states spread evenly; the labels do not depend on it."""
    if not num_cpus > 0:
        raise DeepShareError(f"expert iteration: num_cpus per labelling task must be positive, got {num_cpus!r}")
    if on_ray is None:
        on_ray = ray_connected()
    if not on_ray or not states:
        return planner_decisions(states, config)
    import ray

    if not ray.is_initialized():
        raise DeepShareError("expert iteration: labelling on Ray needs a connection (--address) first")
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) / num_cpus))
    count = max(1, min(len(states), slots * tasks_per_slot))
    task = ray.remote(num_cpus=num_cpus, max_retries=3)(planner_decisions)
    shared = ray.put(config)
    refs = [task.remote(list(states[i::count]), shared) for i in range(count)]
    out: list[Decision | None] = [None] * len(states)
    for i, part in enumerate(ray.get(refs)):
        out[i::count] = part
    return out  # type: ignore[return-value]


# -- playing episodes ---------------------------------------------------------------------------------
Key = tuple[str, tuple[tuple[int, int], ...]]
"""A launch as (job id, allocation): how a row and a planner's launch are matched."""


@dataclass
class Visits:
    """The choices of some episodes (stacked like :class:`~deepshare.rl.imitate.Demonstrations`)
    and the decision points they belong to."""

    observations: np.ndarray
    masks: np.ndarray
    episodes: np.ndarray
    points: np.ndarray
    """[N]: the index in ``states`` of each choice's decision point."""
    anchor_rows: np.ndarray
    """[N]: the anchor heuristic's row at each choice (what ``imitate`` would label)."""
    rows: list[tuple[Key | None, ...]]
    """Each choice's offered rows (None: wait)."""
    made: list[frozenset[str]]
    """Each choice's jobs already launched in its decision."""
    states: list[LabelState]
    seeds: list[int] = field(default_factory=list)
    avg_jct_s: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.points)


def visit(
    env_config: EnvConfig, episodes: int, seed_base: int, window: int,
    driver: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> Visits:
    """Play ``episodes`` episodes (env seeds ``seed_base ..``) taking the anchor's row (no
    ``driver``) or the driver's best unmasked row at every choice, safety net off; keep every
    choice and every decision point (a :class:`LabelState`, with the episode's ``window`` most
    recent jobs seen so far). ``progress(done, total, choices)`` after each episode."""
    if env_config.anchor is None:
        raise DeepShareError("expert iteration: the env's anchor is null; round 0 plays the anchor heuristic")
    if episodes < 1:
        raise DeepShareError(f"expert iteration: episodes must be positive, got {episodes}")
    if not 0 <= seed_base or seed_base + episodes > SUITE_SEED_BASE:
        raise DeepShareError(f"expert iteration: episode seeds must lie in [0, 2^31), got {seed_base}..{seed_base + episodes - 1}")
    env = DeepShareEnv(replace(env_config, hybrid=False))
    anchor = env_config.anchor
    obs_rows, masks, owner, points, anchors = [], [], [], [], []
    rows_of: list[tuple[Key | None, ...]] = []
    made_of: list[frozenset[str]] = []
    states: list[LabelState] = []
    seeds, jcts = [], []
    for episode in range(episodes):
        seed = seed_base + episode
        obs, _ = env.reset(seed=seed)
        contention = env.episode_contention()
        seen = SeenJobs()
        last_view: ClusterView | None = None
        done, info = False, {}
        while not done:
            partial, rows = env.choice()
            if partial.view is not last_view:  # a new decision point (its partials share the view)
                last_view = partial.view
                seen.observe(last_view)
                states.append(detach(last_view, contention, seen.recent(window)))
            anchor_row = anchor_action(partial, rows, anchor)
            obs_rows.append(obs["observations"].copy())
            masks.append(obs["action_mask"].copy())
            owner.append(episode)
            points.append(len(states) - 1)
            anchors.append(anchor_row)
            rows_of.append(tuple(None if c.job is None else (c.job.job_id, c.placement.alloc) for c in rows))  # type: ignore[union-attr]
            made_of.append(frozenset(launch.job_id for launch in partial.launches))
            taken = anchor_row if driver is None else best_row(driver(obs), obs["action_mask"])
            obs, _, terminated, truncated, info = env.step(taken)
            done = terminated or truncated
        seeds.append(seed)
        jcts.append(float(info["report"]["avg_jct_s"]) if "report" in info else float("nan"))
        if progress is not None:
            progress(episode + 1, episodes, len(points))
    k, f = env.observation_space["observations"].shape
    return Visits(
        np.stack(obs_rows) if obs_rows else np.zeros((0, k, f), np.float32),
        np.stack(masks) if masks else np.zeros((0, k), np.float32),
        np.asarray(owner, dtype=np.int64), np.asarray(points, dtype=np.int64), np.asarray(anchors, dtype=np.int64),
        rows_of, made_of, states, seeds, jcts,
    )


# -- decisions to row labels --------------------------------------------------------------------------
@dataclass
class LabelStats:
    """How the planner's decisions became labels (counts of choices)."""

    choices: int = 0
    labelled: int = 0
    waits: int = 0
    """Labelled choices whose label is wait."""
    not_offered: int = 0
    """Skipped: the planner's next launch is not among the offered rows."""
    preemptive: int = 0
    """Skipped: the planner's decision preempts or migrates (no row expresses it)."""
    wait_masked: int = 0
    """Skipped: the planner launches nothing more but waiting is masked there."""
    agree_with_anchor: int = 0
    """Labelled choices whose label is the anchor heuristic's row."""
    decision_points: int = 0
    contested_points: int = 0
    """Decision points whose first choice's planner row (None when skipped) is not the anchor's."""

    @property
    def coverage(self) -> float:
        """Share of the choices that got a label."""
        return self.labelled / self.choices if self.choices else float("nan")

    @property
    def anchor_agreement(self) -> float:
        """Share of the labelled choices where the planner's row is the anchor's."""
        return self.agree_with_anchor / self.labelled if self.labelled else float("nan")

    def plus(self, other: "LabelStats") -> "LabelStats":
        return LabelStats(**{k: getattr(self, k) + getattr(other, k) for k in asdict(self)})

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "coverage": self.coverage, "anchor_agreement": self.anchor_agreement}


def planner_row(decision: Decision, rows: Sequence[Key | None], made: frozenset[str]) -> int | None:
    """The row of the planner's next launch not yet made (a job ``made`` has launched is passed
    over), wait (row 0) when it launches nothing more; None when that launch is not offered or
    the decision preempts or migrates (see :func:`label_choices`)."""
    if decision.preempt or decision.migrate:
        return None
    for launch in decision.launch:
        if launch.job_id in made:
            continue
        key = (launch.job_id, launch.placement.alloc)
        for row, offered in enumerate(rows):
            if offered == key:
                return row
        return None
    return WAIT_INDEX


def label_choices(visits: Visits, decisions: Sequence[Decision]) -> tuple[Demonstrations, LabelStats]:
    """``visits``' choices labelled with the planner's rows (``decisions[i]`` is its decision on
    ``visits.states[i]``); the skipped ones left out and counted."""
    if len(decisions) != len(visits.states):
        raise ValueError(f"{len(decisions)} decisions for {len(visits.states)} decision points")
    stats = LabelStats(choices=len(visits), decision_points=len(visits.states))
    keep, labels = [], []
    first_of_point = -1
    for i in range(len(visits)):
        point = int(visits.points[i])
        decision = decisions[point]
        row = planner_row(decision, visits.rows[i], visits.made[i])
        if point != first_of_point:
            first_of_point = point
            stats.contested_points += row != int(visits.anchor_rows[i])
        if row is None:
            if decision.preempt or decision.migrate:
                stats.preemptive += 1
            else:
                stats.not_offered += 1
            continue
        if visits.masks[i][row] == 0:
            stats.wait_masked += 1
            continue
        keep.append(i)
        labels.append(row)
        stats.labelled += 1
        stats.waits += row == WAIT_INDEX
        stats.agree_with_anchor += row == int(visits.anchor_rows[i])
    idx = np.asarray(keep, dtype=np.int64)
    demos = Demonstrations(visits.observations[idx], visits.masks[idx], np.asarray(labels, dtype=np.int64),
                           visits.episodes[idx], seeds=list(visits.seeds), avg_jct_s=list(visits.avg_jct_s))
    return demos, stats


# -- the rounds -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExpertSettings:
    """What :func:`expert_iteration` does beyond :class:`~deepshare.rl.imitate.FitSettings`."""

    teacher: PlannerConfig = PlannerConfig(futures=4)
    teacher_name: str = "planner=4"
    """How the teacher was named (recorded with the policy)."""
    episodes: int = 16
    """Episodes per round."""
    rounds: int = 1
    """Rounds after round 0 (the anchor's own episodes), each driven by the scorer fitted so far."""
    seed_base: int = 0
    label_cpus: float = 1.0
    """CPUs each Ray labelling task asks for (fractional allowed)."""
    on_ray: bool | None = None
    """Label as Ray tasks (None: when this process is connected to Ray)."""


def expert_iteration(
    config_path: str | Path, out: str | Path, settings: ExpertSettings,
    fit_settings: FitSettings | None = None, log: Callable[[str], None] | None = None,
) -> Path:
    """Expert iteration on the env of the training YAML at ``config_path`` (see the module doc);
    exports ``OUT/policy.pt`` and ``OUT/expert.json`` and returns the policy file. Round ``r``'s
    episodes use seeds ``seed_base + r * episodes ..``, and ``episodes`` more after the last round
    measure the final scorer against the anchor (no planner there), all below 2^31."""
    from deepshare.policies.checkpoint import TorchScorer, export_scorer
    from deepshare.rl.train import load_train_config

    config = load_train_config(config_path)
    env = config.env_config(Path(config_path).parent)
    fit_settings = fit_settings or FitSettings(hidden=config.model.hidden)
    say = log or (lambda _msg: None)
    if settings.rounds < 0:
        raise DeepShareError(f"expert iteration: rounds must be >= 0, got {settings.rounds}")
    last_seed = settings.seed_base + settings.episodes * (settings.rounds + 2) - 1
    if last_seed >= SUITE_SEED_BASE:
        raise DeepShareError(f"expert iteration: episode seeds {settings.seed_base}..{last_seed} reach 2^31 (the "
                             "suite's traces); lower the seed base, the episodes or the rounds")
    on_ray = ray_connected() if settings.on_ray is None else settings.on_ray
    where = "as Ray tasks" if on_ray else "in this process"
    began, wall = time.process_time(), time.perf_counter()
    demos: Demonstrations | None = None
    total = LabelStats()
    net, report = None, None
    rounds: list[dict[str, Any]] = []
    for r in range(settings.rounds + 1):
        seed = settings.seed_base + r * settings.episodes
        t = time.perf_counter()
        driver = None if net is None else TorchScorer(net)
        visits = visit(env, settings.episodes, seed, settings.teacher.window, driver)
        play_s = time.perf_counter() - t
        t = time.perf_counter()
        decisions = label_states(visits.states, settings.teacher, on_ray=on_ray, num_cpus=settings.label_cpus)
        label_s = time.perf_counter() - t
        labelled, stats = label_choices(visits, decisions)
        total = total.plus(stats)
        driven_jct = float(np.mean(visits.avg_jct_s))
        row: dict[str, Any] = {"round": r, "driver": "anchor" if net is None else "scorer", "episode_seeds":
                               [seed, seed + settings.episodes - 1], "avg_jct_s": driven_jct,
                               "play_s": play_s, "label_s": label_s, "labels": stats.summary()}
        if net is not None:
            anchor_jct = collect(env, settings.episodes, seed).avg_jct_s
            ratios = np.asarray(visits.avg_jct_s) / np.asarray(anchor_jct)
            row["scorer_over_anchor_avg_jct"] = float(np.exp(np.mean(np.log(ratios))))
        say(f"round {r}: {settings.episodes} {row['driver']}-driven episodes, {len(visits)} choices at "
            f"{len(visits.states)} decision points ({play_s:.1f} s); planner labels {where} in {label_s:.1f} s: "
            f"coverage {stats.coverage:.1%} (not offered {stats.not_offered}, preemptive {stats.preemptive}, "
            f"wait masked {stats.wait_masked}), agreement with the anchor {stats.anchor_agreement:.1%}"
            + (f"; the scorer's episodes average {row['scorer_over_anchor_avg_jct']:.4f}x the anchor's JCT"
               if "scorer_over_anchor_avg_jct" in row else ""))
        demos = labelled if demos is None else demos.extended(labelled, r)
        if len(demos) == 0:
            raise DeepShareError("expert iteration: no choice got a planner label; nothing to learn from")
        net, report = fit(demos, fit_settings, start=net)
        row.update(choices=len(demos), held_out_accuracy=report.held_out_accuracy, fit_cpu_s=report.seconds)
        say(f"  fit on {len(demos)} labelled choices: held-out accuracy {report.held_out_accuracy:.4f} "
            f"(train {report.train_accuracy:.4f})")
        rounds.append(row)
    assert demos is not None and net is not None and report is not None
    _, gap = learner_gap(env, net, settings.episodes, settings.seed_base + (settings.rounds + 1) * settings.episodes)
    say(f"final scorer: its own episodes average {gap:.4f}x the anchor's JCT (fresh seeds)")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    summary = {
        "trainer": f"imitation: expert iteration (round 0 on the anchor's episodes, {settings.rounds} DAgger "
                   "round(s), every state labelled by the planner)",
        "imitates": settings.teacher_name, "teacher": settings.teacher_name, "dagger_rounds": settings.rounds,
        "anchor": "+".join(env.anchor or ()), "teacher_config": asdict(settings.teacher),
        "deterministic_labels": settings.teacher.budget_s is None,
        "config": str(config_path), "name": config.name, "env": asdict(env),
        "episodes": settings.episodes, "rounds": settings.rounds, "episode_seeds": [settings.seed_base, last_seed],
        "choices": len(demos), "wait_share": demos.wait_share,
        "label_coverage": total.coverage, "anchor_agreement": total.anchor_agreement, "labels": total.summary(),
        "labelled_on": "ray" if on_ray else "local", "label_cpus": settings.label_cpus if on_ray else None,
        "fit": asdict(fit_settings), "model": {"hidden": fit_settings.hidden},
        **asdict(report), "round_log": rounds, "learner_over_anchor_avg_jct": gap,
        "total_cpu_s": time.process_time() - began, "wall_s": time.perf_counter() - wall,
    }
    policy = folder / "policy.pt"
    export_scorer(net, env.encoding, policy, summary)
    write_text_atomic(folder / "expert.json", json_text(summary, default=str), "run summary")
    return policy
