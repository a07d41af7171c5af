"""The straightforward decision code the indexed paths replaced, kept as the reference they are
tested against (tests/policies/test_decide_scale.py): every step re-reads the whole view, sorts the whole
queue and scans every node, on plain lists (so the placements take their reference scans too).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from deepshare.policies.anchor import check_anchor
from deepshare.policies.posterior import expected_remaining_s
from deepshare.policies.encoding import FEATURES, JOB_FEATURES, WAIT_INDEX, Candidate, EncodingConfig, PartialDecision, _log_hours, _waiting_would_stall
from deepshare.policies.order import ORDERS
from deepshare.policies.placement import PLACEMENTS

if TYPE_CHECKING:
    from deepshare.core.types import Placement
    from deepshare.core.view import ClusterView, JobView


def anchor_pick(
    view: ClusterView,
    free: Sequence[int],
    launched: set[str],
    pending: Sequence[tuple[JobView, Placement]],
    anchor: Sequence[str],
) -> tuple[JobView, Placement] | None:
    """The anchor heuristic's next launch given the launches already chosen, or None (it waits)."""
    order, place_name = check_anchor(anchor)
    place = PLACEMENTS[place_name][0]
    total = sum(free)
    fitting = [j for j in view.queued if j.gpus <= total and j.job_id not in launched]
    if not fitting:
        return None
    fitting.sort(key=ORDERS[order][0](view))
    failed: set[int] = set()
    free_list = list(free)
    for job in fitting:
        if job.gpus in failed:
            continue
        placement = place(job, free_list, view, pending)
        if placement is not None:
            return job, placement
        failed.add(job.gpus)
    return None


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
            if len(found) >= config.max_candidates:
                return found[:config.max_candidates]
    return found[:config.max_candidates]



def assert_encodes_as_reference(partial: PartialDecision, fresh: PartialDecision, config: EncodingConfig
                                ) -> list[Candidate]:
    """The shipped encoding of ``partial`` equals this reference's of ``fresh`` (the same launches,
    a partial that has never been encoded), rows and observation bit for bit; returns the rows."""
    from deepshare.policies.encoding import encode as shipped

    obs, rows = shipped(partial, config)
    ref_obs, ref_rows = encode(fresh, config)
    assert rows == ref_rows
    np.testing.assert_array_equal(obs["observations"], ref_obs["observations"])
    np.testing.assert_array_equal(obs["action_mask"], ref_obs["action_mask"])
    return rows


def encode(partial: PartialDecision, config: EncodingConfig) -> tuple[dict[str, np.ndarray], list[Candidate]]:
    """The observation ``{"observations": (K, F) float32, "action_mask": (K,) float32}`` and its rows."""
    view = partial.view
    rows = candidates(partial, config)
    obs = np.zeros((config.max_candidates, len(config.features)), dtype=np.float32)
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
        obs[i, len(JOB_FEATURES):len(FEATURES)] = glob
    if config.extra_features:
        obs[:len(rows), len(FEATURES):] = extra_columns(partial, rows, config)
    if _waiting_would_stall(partial, rows):
        mask[WAIT_INDEX] = 0.0
    return {"observations": obs, "action_mask": mask}, rows


def extra_columns(partial: PartialDecision, rows: list[Candidate], config: EncodingConfig) -> list[list[float]]:
    """The optional columns (deepshare/policies/extra_features.py), each row from scratch: the
    anchor asked again, every running job and every launch so far scanned for each row."""
    view = partial.view
    pending = partial.pending()
    launched = {launch.job_id for launch in partial.launches}
    pick = anchor_pick(view, partial.free, launched, pending, config.anchor) if config.anchor is not None else None

    def left(job) -> float:
        return job.remaining_s / max(job.ratio, 0.01)

    lefts = [left(job) for job in view.running]
    next_finish = _log_hours(min(lefts)) if lefts else 0.0
    out = []
    for i, row in enumerate(rows):
        met = []
        if row.placement is not None:
            nodes = set(row.placement.nodes)
            met = [left(j) for j in view.running if j.placement is not None and nodes & set(j.placement.nodes)]
            met += [j.remaining_s for j, p in pending if nodes & set(p.nodes)]
        job = row.job
        forecast = None if job is None else view.history.forecast(job.gpus, job.user, job.group, job.vc)
        values = {
            "is_anchor": float(i == 1 and pick is not None and (pick[0].job_id, pick[1].alloc) == (row.job.job_id, row.placement.alloc)),
            "neighbours_min_left_h": _log_hours(min(met)) if met else 0.0,
            "neighbours_max_left_h": _log_hours(max(met)) if met else 0.0,
            "next_finish_h": next_finish,
            "belief_left_h": 0.0 if job is None else _log_hours(expected_remaining_s(job, view.history, view.durations)),
            "history_jobs": math.log1p(forecast.jobs) if forecast is not None else 0.0,
            "history_spread": forecast.spread if forecast is not None else 0.0,
            "has_estimate": float(job is not None and job.estimate_s is not None),
        }
        out.append([values[name] for name in config.extra_features])
    return out
