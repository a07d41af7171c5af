"""The link-level contention physics: shared links, duty cycles and iteration times.

A *system* is a set of jobs and the links they cross. Each (job, link) *edge* carries the
job's per-iteration *work* on that link: the seconds the link would be busy with the job's
bytes if the job had it alone. A job's iteration time is

    t = max(c, comm) + (1 - overlap) * min(c, comm),   comm = max(private, max_l work_l * s_l)

where ``c`` is its compute time and ``s_l`` its *stretch* on link ``l``. Bandwidth on a link is
shared max-min fairly among the jobs communicating over it at the same moment (equal shares on
one link; a job held back by another link uses less of this one). Averaged over the other
jobs' communication duty cycles ``d_il = min(1, work_il * s_il / t_i)``, that gives

    s_jl = 1 + sum_{i != j on l} max(1, (1 + congestion_j) * sensitivity_j * kappa[model_j, model_i]) * d_il

``congestion`` (fitted per model, >= 0) lets a victim lose more than a fair share (the measured
table goes below 1/2 for two jobs: transport back-off, not bandwidth alone), ``sensitivity``
(fitted per measured placement of a model, 1 elsewhere) how much more or less than its model's
typical placement this placement reacts (NCCL picks channels and algorithms by shape), and
``kappa`` (fitted per model pair, 1 by default) how strongly one traffic pattern interferes with
another. The coefficient
never goes below 1, the fair share itself, so the jobs on a link never use more than its
capacity on average: sum_i work_il / t_i <= 1. Two jobs that always communicate on one link with
congestion 0 and kappa 1 get half of it each. The fixed
point is found by a damped iteration with a fixed number of steps, so results are reproducible.

*Background* (optional, per link, 0..1): load on a link that no job of the system explains
(traffic of work the scheduler does not manage, measured by the node agents). It adds to every
stretch on its link like an aggressor at that duty with the fair-share coefficient 1.
:func:`link_loads` gives the load the system's own jobs put on each link (the bandwidth they use
over its capacity): what a probe on the link would measure.
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
    sensitivity: np.ndarray | None = None  # (J,) > 0, the placement's factor on the gain; None: 1
    background: np.ndarray | None = None   # (n_links,) >= 0, load of unmanaged traffic; None: 0


def iteration_time(compute: np.ndarray, comm: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    return np.maximum(compute, comm) + (1.0 - overlap) * np.minimum(compute, comm)


_ZERO = np.zeros(1)


class _Comm:
    """Per job: the larger of its private work and its slowest (stretched) shared link.

    Edges are laid out as a (degree, jobs) table of edge positions, padded with a position
    that holds 0, so the maximum is one gather and one reduction over the short first axis
    (much faster than ``np.maximum.reduceat`` over many short segments).
    """

    def __init__(self, system: System) -> None:
        jobs = system.edge_job
        self._private = system.private
        n_jobs, n_edges = len(system.private), len(jobs)
        counts = np.bincount(jobs, minlength=n_jobs) if n_edges else np.zeros(n_jobs, dtype=np.int64)
        starts = np.cumsum(counts) - counts
        rank = np.arange(n_edges) - starts[jobs] if n_edges else jobs
        table = np.full((int(counts.max(initial=0)), n_jobs), n_edges, dtype=np.int64)  # n_edges: the 0 pad
        table[rank, jobs] = np.arange(n_edges)
        self._table = table

    def __call__(self, stretched: np.ndarray) -> np.ndarray:
        if not len(self._table):
            return self._private.copy()
        comm = np.concatenate([stretched, _ZERO])[self._table].max(axis=0)
        return np.maximum(comm, self._private, out=comm)


def isolated_times(system: System) -> np.ndarray:
    """Each job's iteration time with every link to itself."""
    return iteration_time(system.compute, _Comm(system)(system.work), system.overlap)


def solve(system: System) -> np.ndarray:
    """Each job's iteration time while sharing its links with the others in the system.

    The coefficient ``max(1, (1 + congestion_j) * kappa[model_j, model_i])`` depends only on the
    victim's (model, congestion) *type* and the aggressor's model, so each step sums the duty
    cycles per (link, aggressor model) and multiplies by the (types x models) coefficients: the
    cost per step is linear in the edges, not edges x models, and every step works in place.
    """
    if len(system.edge_job) == 0:
        return isolated_times(system)
    stretch, comm = _fixed_point(system)
    return iteration_time(system.compute, comm(system.work * stretch), system.overlap)


def link_loads(system: System) -> np.ndarray:
    """Per link, the bandwidth its jobs use at the fixed point as a fraction of its capacity,
    ``sum_i work_il / t_i`` (each job moves its bytes once per iteration; at most 1 by the model's
    capacity rule): the utilisation a probe on the link reads."""
    if len(system.edge_job) == 0:
        return np.zeros(system.n_links)
    t = solve(system)
    used = system.work / t[system.edge_job]
    return np.minimum(np.bincount(system.edge_link, weights=used, minlength=system.n_links), 1.0)


def _fixed_point(system: System) -> tuple[np.ndarray, "_Comm"]:
    """The stretch of every edge after the damped iteration, and the per-job comm reducer."""
    jobs = system.edge_job
    models, job_model = np.unique(system.model, return_inverse=True)   # the models present
    gain = 1.0 + system.congestion
    if system.sensitivity is not None:
        gain = gain * system.sensitivity
    gains, job_gain = np.unique(gain, return_inverse=True)
    type_keys, job_type = np.unique(job_model.reshape(-1) * len(gains) + job_gain.reshape(-1), return_inverse=True)
    job_model, job_type = job_model.reshape(-1), job_type.reshape(-1)
    n_models, n_types = len(models), len(type_keys)
    kappa = system.kappa[np.ix_(models, models)]
    coef = np.maximum(1.0, gains[type_keys % len(gains)][:, None] * kappa[type_keys // len(gains)])  # (T, M)
    edge_model, edge_type = job_model[jobs], job_type[jobs]
    self_coef = coef[edge_type, edge_model]                                          # (E,)
    slot = system.edge_link * n_models + edge_model
    seen_at = system.edge_link * n_types + edge_type
    n_slots = system.n_links * n_models
    comm = _Comm(system)
    work, compute, overlap = system.work, system.compute, system.overlap
    hidden = 1.0 - overlap
    n_edges = len(jobs)
    stretch = np.ones(n_edges)
    stretched, duty, scratch, new = (np.empty(n_edges) for _ in range(4))
    coef_t = np.ascontiguousarray(coef.T)
    background = None if system.background is None else system.background[system.edge_link]
    for _ in range(ITERATIONS):
        np.multiply(work, stretch, out=stretched)
        c = comm(stretched)
        t = np.maximum(compute, c)
        t += hidden * np.minimum(compute, c)                     # iteration_time, unrolled
        np.take(t, jobs, out=duty)
        np.divide(stretched, duty, out=duty)
        np.minimum(duty, 1.0, out=duty)
        load = np.bincount(slot, weights=duty, minlength=n_slots).reshape(system.n_links, n_models)
        others = (load @ coef_t).reshape(-1)[seen_at]                                     # (L, T) -> (E,)
        np.multiply(self_coef, duty, out=scratch)
        others -= scratch
        np.maximum(others, 0.0, out=others)
        if background is not None:
            others += background
        others += 1.0
        others *= 1.0 - DAMPING
        np.multiply(stretch, DAMPING, out=new)
        new += others                                            # DAMPING * s + (1 - DAMPING) * (1 + others)
        stretch, new = new, stretch
    return stretch, comm


def ratios(system: System) -> np.ndarray:
    """Throughput under sharing / isolated throughput, per job, in (0, 1]."""
    return np.minimum(1.0, isolated_times(system) / solve(system))
