"""The link-level contention physics: shared links, duty cycles and iteration times.

A *system* is a set of jobs and the links they cross. Each (job, link) *edge* carries the
job's per-iteration *work* on that link: the seconds the link would be busy with the job's
bytes if the job had it alone. A job's iteration time is

    t = max(c, comm) + (1 - overlap) * min(c, comm),   comm = max(private, max_l work_l * s_l)

where ``c`` is its compute time and ``s_l`` its *stretch* on link ``l``. Bandwidth on a link is
shared max-min fairly among the jobs communicating over it at the same moment (equal shares on
one link; a job held back by another link uses less of this one). Averaged over the other
jobs' communication duty cycles ``d_il = min(1, work_il * s_il / t_i)``, that gives

    s_jl = 1 + sum_{i != j on l} max(1, (1 + congestion_j) * kappa[model_j, model_i]) * d_il

``congestion`` (fitted, >= 0) lets a victim lose more than a fair share (the measured table goes
below 1/2 for two jobs: transport back-off, not bandwidth alone) and ``kappa`` (fitted per model
pair, 1 by default) how strongly one traffic pattern interferes with another. The coefficient
never goes below 1, the fair share itself, so the jobs on a link never use more than its
capacity on average: sum_i work_il / t_i <= 1. Two jobs that always communicate on one link with
congestion 0 and kappa 1 get half of it each. The fixed
point is found by a damped iteration with a fixed number of steps, so results are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ITERATIONS = 40
DAMPING = 0.5


@dataclass(frozen=True)
class System:
    """Jobs (indexed 0..J-1) and their edges, sorted by job. Arrays are read-only by contract."""

    model: np.ndarray        # (J,) int: row/column of kappa
    compute: np.ndarray      # (J,) compute seconds per iteration (latency included)
    overlap: np.ndarray      # (J,) in [0, 1]
    congestion: np.ndarray   # (J,) >= 0
    private: np.ndarray      # (J,) uncontended communication seconds per iteration
    edge_job: np.ndarray     # (E,) int, non-decreasing
    edge_link: np.ndarray    # (E,) int in [0, n_links)
    work: np.ndarray         # (E,) seconds per iteration at the link's full capacity
    n_links: int
    kappa: np.ndarray        # (M, M) victim model x aggressor model


def iteration_time(compute: np.ndarray, comm: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    return np.maximum(compute, comm) + (1.0 - overlap) * np.minimum(compute, comm)


class _Comm:
    """Per job: the larger of its private work and its slowest (stretched) shared link."""

    def __init__(self, system: System) -> None:
        jobs = system.edge_job
        self._private = system.private
        self._starts = np.flatnonzero(np.r_[True, jobs[1:] != jobs[:-1]]) if len(jobs) else jobs
        self._owners = jobs[self._starts]

    def __call__(self, stretched: np.ndarray) -> np.ndarray:
        comm = self._private.copy()
        if len(self._starts):
            comm[self._owners] = np.maximum(comm[self._owners], np.maximum.reduceat(stretched, self._starts))
        return comm


def isolated_times(system: System) -> np.ndarray:
    """Each job's iteration time with every link to itself."""
    return iteration_time(system.compute, _Comm(system)(system.work), system.overlap)


def solve(system: System) -> np.ndarray:
    """Each job's iteration time while sharing its links with the others in the system."""
    n_models = system.kappa.shape[0]
    jobs = system.edge_job
    edge_model = system.model[jobs]
    gain = (1.0 + system.congestion[jobs])[:, None]              # (E, 1)
    kappa_rows = np.maximum(1.0, gain * system.kappa[edge_model])  # (E, M): victim row, fair share at least
    self_kappa = kappa_rows[np.arange(len(jobs)), edge_model]      # (E,)
    slot = system.edge_link * n_models + edge_model             # (E,)
    comm = _Comm(system)
    stretch = np.ones(len(jobs))
    for _ in range(ITERATIONS):
        t = iteration_time(system.compute, comm(system.work * stretch), system.overlap)
        duty = np.minimum(1.0, system.work * stretch / t[jobs])
        per_link_model = np.bincount(slot, weights=duty, minlength=system.n_links * n_models)
        per_link_model = per_link_model.reshape(system.n_links, n_models)
        others = np.einsum("em,em->e", kappa_rows, per_link_model[system.edge_link]) - self_kappa * duty
        stretch = DAMPING * stretch + (1.0 - DAMPING) * (1.0 + np.maximum(others, 0.0))
    return iteration_time(system.compute, comm(system.work * stretch), system.overlap)


def ratios(system: System) -> np.ndarray:
    """Throughput under sharing / isolated throughput, per job, in (0, 1]."""
    return np.minimum(1.0, isolated_times(system) / solve(system))
