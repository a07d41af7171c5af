"""Size-invariant observation and action encoding, shared by training, evaluation and serving.

A decision point is a sequence of choices. At each choice the policy sees up to ``K`` candidate
actions: row 0 is *wait* (launch nothing more now); row 1 is the anchor heuristic's next launch
(``srsf+packed`` by default, :mod:`deepshare.policies.anchor`) when it would launch one, so a
scorer can always imitate the strongest heuristic; the other rows are (queued job, placement)
pairs from the placement generators (consolidated, spread, contention-aware) for a few queued
jobs that fit. Every row carries the same ``F`` features (the job's and the placement's, then
the cluster's global features), so one network scores every row alike and the encoding works for
any cluster size. Padding rows are masked out. Choosing a launch adds it to a
:class:`PartialDecision` and the next choice is encoded on the GPUs that remain; choosing wait
(or having nothing feasible left) ends the decision.

``encode(partial)`` -> ``(observation, candidates)`` and ``decode(action, partial)`` are the only
way a view becomes numbers and a number becomes a launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from deepshare.core.types import Decision, Launch, Placement
from deepshare.core.view import ClusterView, JobView
from deepshare.policies.anchor import DEFAULT_ANCHOR, anchor_pick, check_anchor
from deepshare.policies.placement import PLACEMENTS

COMM_CLASSES = ("low", "medium", "heavy")
JOB_FEATURES = (
    "comm_low", "comm_medium", "comm_heavy", "log2_gpus", "remaining_h", "attained_gpu_h", "waiting_h",
    "nodes_per_gpu", "predicted_ratio", "others_loss", "free_after", "relative_throughput", "is_wait",
    "preemptions",
)
GLOBAL_FEATURES = ("utilisation", "queue_length", "running_jobs", "free_over_demand")
FEATURES = JOB_FEATURES + GLOBAL_FEATURES
WAIT_INDEX = 0


@dataclass(frozen=True)
class EncodingConfig:
    """How many candidates a choice shows, and where they come from."""

    max_candidates: int = 16
    """K: rows of the observation (row 0 is wait)."""
    jobs_considered: int = 5
    """Queued jobs that fit offered per choice: half the oldest, the rest the least remaining GPU-time."""
    generators: tuple[str, ...] = ("consolidated", "spread", "contention-aware")
    """Placement strategies (registry names) that propose placements for each job."""
    anchor: tuple[str, ...] | None = DEFAULT_ANCHOR
    """(order, placement) of the heuristic whose next launch is always offered (row 1); None:
    not offered. Checkpoints exported before it existed load with the default."""

    def __post_init__(self) -> None:
        if self.anchor is not None:
            object.__setattr__(self, "anchor", check_anchor(self.anchor))
        if self.max_candidates < 2:
            raise ValueError(f"max_candidates must be at least 2 (wait + one launch), got {self.max_candidates}")
        if self.jobs_considered < 1:
            raise ValueError(f"jobs_considered must be positive, got {self.jobs_considered}")
        unknown = [g for g in self.generators if g not in PLACEMENTS]
        if unknown or not self.generators:
            raise ValueError(f"unknown placement generators {unknown}; expected some of {sorted(PLACEMENTS)}")


@dataclass(frozen=True)
class PartialDecision:
    """A decision point plus the launches already chosen in it."""

    view: ClusterView
    launches: tuple[Launch, ...] = ()
    free: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.free:
            object.__setattr__(self, "free", tuple(self.view.free))

    def with_launch(self, job: JobView, placement: Placement) -> "PartialDecision":
        free = list(self.free)
        for node, gpus in placement.alloc:
            free[node] -= gpus
        return PartialDecision(self.view, (*self.launches, Launch(job.job_id, placement)), tuple(free))

    @property
    def decision(self) -> Decision:
        return Decision(launch=self.launches)

    def pending(self) -> list[tuple[JobView, Placement]]:
        by_id = {job.job_id: job for job in self.view.queued}
        return [(by_id[launch.job_id], launch.placement) for launch in self.launches]


@dataclass(frozen=True)
class Candidate:
    job: JobView | None  # None = wait
    placement: Placement | None


def _jobs_offered(partial: PartialDecision, config: EncodingConfig) -> list[JobView]:
    launched = {launch.job_id for launch in partial.launches}
    total_free = sum(partial.free)
    fitting = [j for j in partial.view.queued if j.job_id not in launched and j.gpus <= total_free]
    oldest = sorted(fitting, key=lambda j: (j.submit_time, j.job_id))[: (config.jobs_considered + 1) // 2]
    shortest = sorted(fitting, key=lambda j: (j.remaining_s * j.gpus, j.submit_time, j.job_id))
    chosen = list(oldest)
    for job in shortest:
        if len(chosen) >= config.jobs_considered:
            break
        if job not in chosen:
            chosen.append(job)
    return chosen


def candidates(partial: PartialDecision, config: EncodingConfig) -> list[Candidate]:
    """Wait, then the distinct (job, placement) launches, at most ``max_candidates`` in all."""
    found = [Candidate(None, None)]
    pending = partial.pending()
    offered: set[tuple[str, Placement]] = set()
    if config.anchor is not None:
        launched = {launch.job_id for launch in partial.launches}
        pick = anchor_pick(partial.view, partial.free, launched, pending, config.anchor)
        if pick is not None:
            found.append(Candidate(*pick))
            offered.add((pick[0].job_id, pick[1]))
    for job in _jobs_offered(partial, config):
        seen: set[Placement] = set()
        for name in config.generators:
            place = PLACEMENTS[name][0]
            placement = place(job, list(partial.free), partial.view, pending)
            if placement is not None and placement not in seen:
                seen.add(placement)
                if (job.job_id, placement) not in offered:
                    found.append(Candidate(job, placement))
            if len(found) == config.max_candidates:
                return found
    return found


def _log_hours(seconds: float) -> float:
    return math.log1p(max(0.0, seconds) / 3600.0)


def encode(partial: PartialDecision, config: EncodingConfig) -> tuple[dict[str, np.ndarray], list[Candidate]]:
    """The observation ``{"observations": (K, F) float32, "action_mask": (K,) float32}`` and its rows."""
    view = partial.view
    rows = candidates(partial, config)
    obs = np.zeros((config.max_candidates, len(FEATURES)), dtype=np.float32)
    mask = np.zeros(config.max_candidates, dtype=np.float32)
    pending = partial.pending()
    total = view.total_gpus
    free_total = sum(partial.free)
    launched = {launch.job_id for launch in partial.launches}
    waiting = [j for j in view.queued if j.job_id not in launched]
    demand = sum(j.gpus for j in waiting)
    glob = (
        1.0 - free_total / total,
        math.log1p(len(waiting)),
        math.log1p(len(view.running) + len(partial.launches)),
        min(1.0, free_total / demand) if demand else 1.0,
    )
    thp = view.catalog.throughput
    best_iso: dict[str, float] = {}
    for c in rows[1:]:
        assert c.job is not None and c.placement is not None
        value = thp(c.job.model, c.job.gpus, c.placement.num_nodes)
        best_iso[c.job.job_id] = max(best_iso.get(c.job.job_id, 0.0), value)
    for i, c in enumerate(rows):
        mask[i] = 1.0
        if c.job is None:
            obs[i, JOB_FEATURES.index("is_wait")] = 1.0
        else:
            job, placement = c.job, c.placement
            assert placement is not None
            prediction = view.predict(job, placement, pending)
            iso = thp(job.model, job.gpus, placement.num_nodes)
            obs[i, :len(JOB_FEATURES)] = (
                job.comm_class == "low", job.comm_class == "medium", job.comm_class == "heavy",
                math.log2(job.gpus) / 4.0,
                _log_hours(job.remaining_s),
                _log_hours(job.attained_gpu_s),
                _log_hours(view.now - job.queued_since),
                placement.num_nodes / job.gpus,
                prediction.ratio,
                min(4.0, prediction.others_loss),
                (free_total - job.gpus) / total,
                iso / best_iso[job.job_id],
                0.0,
                math.log1p(job.preemptions),
            )
        obs[i, len(JOB_FEATURES):] = glob
    if _waiting_would_stall(partial, rows):
        mask[WAIT_INDEX] = 0.0
    return {"observations": obs, "action_mask": mask}, rows


def _waiting_would_stall(partial: PartialDecision, rows: list[Candidate]) -> bool:
    """Wait is infeasible when nothing runs, nothing is being launched, nothing will arrive or
    finish, and a launch is possible: the cluster would idle forever."""
    view = partial.view
    return len(rows) > 1 and not partial.launches and not view.running and not view.future_events


def decode(action: int, partial: PartialDecision, config: EncodingConfig) -> Candidate:
    """The candidate at row ``action`` (rows are recomputed from ``partial``: same inputs, same rows)."""
    rows = candidates(partial, config)
    if not 0 <= action < len(rows):
        raise ValueError(f"action {action} is not a valid candidate (0..{len(rows) - 1})")
    return rows[action]
