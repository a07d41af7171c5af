"""The recurrence model of synthetic traces: users, recurring groups, time limits, large-runs-long.

Real clusters' jobs are not independent draws: the same user reruns the same script on the same
data (Alibaba PAI 2020 tags such runs with a ``group``, NSDI'22 "MLaaS in the Wild"; Helios'
QSSF predicts a job's duration from earlier jobs of its user and job name, SC'21), users ask
for time limits well above what their jobs take, and job size and length go together. A
:class:`RecurrenceModel` adds those features to :func:`~deepshare.core.traces.generator.generate`
while keeping its marginals exact:

* **Users**: each group belongs to one of ``users`` users, drawn with weights
  ``rank ** -user_skew`` (Zipf), so a few users submit most jobs.
* **Groups**: each job is, with probability ``recurring_share``, a run of a recurring group,
  else a one-off (a group of its own). Recurring groups have ``2 + Geometric`` runs, mean
  ``runs_per_group``, spread at random over the trace. A group keeps one user, model and GPU
  count; every job gets a group name (``grp-00000``, numbered by first appearance).
* **Bursts**: with probability ``burst_share`` a recurring group is a *burst* (a sweep submitted
  at once): its runs take consecutive places among the recurring jobs, starting where its first
  run would have been, instead of places spread over the trace (one-offs still arrive between
  them, so a burst of k runs arrives within about ``k / recurring_share`` inter-arrival times).
  Which groups burst is drawn after everything else, and not at all at 0 (the default), so a
  trace without bursts is the same as before; the other groups keep their relative order.
* **Durations**: ``log d = log median + sigma * (sqrt(1 - r) * Z_group + sqrt(r) * Z_run)`` with
  ``r = run_variance_share``: the group's median is lognormal around the trace's median and its
  runs are lognormal around the group's median. Both normals are standard, so every job's
  duration is exactly lognormal(median, sigma), as without the model (and, as without it,
  kept between a picosecond and a year, :data:`~deepshare.core.bounds.MIN_WORK_S` and
  :data:`~deepshare.core.bounds.MAX_DURATION_S`, a trace's bounds; the load counts the year's cap
  where it matters, :func:`capped`).
* **GPUs**: a Gaussian copula. Each group draws a standard normal ``U``; its GPU count is the
  demand distribution's quantile at ``Phi(U)`` (sizes in increasing order), so the demand
  distribution is kept exactly; ``Z_group`` is correlated with ``U`` so that a job's log
  duration and ``U`` have correlation ``gpu_duration_corr`` (positive: larger jobs run longer).
  That correlation can only come from the group part, hence
  ``|gpu_duration_corr| <= sqrt(1 - run_variance_share)``. :func:`mean_gpu_seconds` gives the
  exact ``E[gpus x duration]`` the load -> rate conversion needs.
* **Time limits**: a share ``requested_share`` of jobs gives ``requested_s = duration x
  max(1, F)`` with ``F`` lognormal (median ``overestimate_median``, log-sigma
  ``overestimate_sigma``): users over-ask; a job whose draw is below 1 ran into its limit
  (Slurm's TIMEOUT), so its limit equals its run time. Limits are drawn per job (a real user
  often reuses one limit for a group; per job keeps durations exact), and capped at a year
  (:data:`~deepshare.core.bounds.MAX_DURATION_S`), never below the job's duration.

Defaults and where they come from (no figure below is taken from a paper unless it says so):

=========================  ========  =======================================================
parameter                  default   source
=========================  ========  =======================================================
``users``                  50        assumption (PAI 2020 had over 1,300 users on 6,742
                                     GPUs over two months, NSDI'22; a generated trace of a
                                     few thousand jobs gets fewer)
``user_skew``              1.0       assumption (Zipf; the Helios artifact plots per-user
                                     GPU time, no figure is encoded here)
``recurring_share``        0.6       assumption (PAI's group tags mark repeated instances,
                                     NSDI'22 studies predicting them; share not encoded)
``runs_per_group``         5         assumption
``burst_share``            0         assumption (off: no bursts; the ``tenants`` suite uses
                                     0.5, an assumption: sweeps submitted at once are common,
                                     their share is not encoded from any trace)
``run_variance_share``     0.1       assumption (runs of a group are predictable: PAI
                                     NSDI'22, Helios QSSF SC'21; size not encoded)
``gpu_duration_corr``      0.3       assumption (sign: larger jobs run longer)
``requested_share``        1.0       Slurm gives every job a limit (Helios, SC'21, logs
                                     Slurm jobs); Philly and PAI logs carry none: use 0
``overestimate_median``    4         assumption, with ``overestimate_sigma`` chosen so that
``overestimate_sigma``     0.7       about 2% of jobs hit their limit: Helios' trace notes
                                     TIMEOUT is very rare (HeliosData README)
=========================  ========  =======================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from deepshare.core import stable_math
from deepshare.core.bounds import MAX_DURATION_S, MIN_WORK_S
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.traces.mixes import ModelMix, assign

_STANDARD = NormalDist()


def _check(name: str, value: Any, low: float, high: float, *, integer: bool = False) -> None:
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.integer, np.floating))
    # bounds first: a 400-digit integer made math.isfinite raise OverflowError (a traceback)
    if isinstance(value, bool) or not ok_type or not (low <= value <= high and math.isfinite(value)):
        raise DeepShareError(f"recurrence model: {name} must be {kind} from {low:g} to {high:g}, got {shown(value)}")


@dataclass(frozen=True)
class RecurrenceModel:
    """Users, recurring groups, time limits and size-length correlation of a synthetic trace.

    See the module doc for the model and where each default comes from.
    """

    users: int = 50
    """Number of users (each group belongs to one)."""
    user_skew: float = 1.0
    """Zipf exponent of users' job shares (0: equal shares)."""
    recurring_share: float = 0.6
    """Share of jobs that are runs of a recurring group (the rest are one-offs)."""
    runs_per_group: float = 5.0
    """Mean runs of a recurring group (at least 2)."""
    burst_share: float = 0.0
    """Share of recurring groups whose runs arrive back to back (a burst; 0: none)."""
    run_variance_share: float = 0.1
    """Share of the log-duration variance between runs of a group (the rest is between groups)."""
    gpu_duration_corr: float = 0.3
    """Correlation of log duration with the GPU count's latent normal (Gaussian copula)."""
    requested_share: float = 1.0
    """Share of jobs that give a time limit (``requested_s``)."""
    overestimate_median: float = 4.0
    """Median of requested / true duration before the limit is floored at the duration."""
    overestimate_sigma: float = 0.7
    """Log-sigma of requested / true duration."""

    def __post_init__(self) -> None:
        _check("users", self.users, 1, 1_000_000, integer=True)
        _check("user_skew", self.user_skew, 0, 5)
        _check("recurring_share", self.recurring_share, 0, 1)
        _check("runs_per_group", self.runs_per_group, 2, 1_000_000)
        _check("burst_share", self.burst_share, 0, 1)
        _check("run_variance_share", self.run_variance_share, 0, 1)
        _check("gpu_duration_corr", self.gpu_duration_corr, -1, 1)
        _check("requested_share", self.requested_share, 0, 1)
        _check("overestimate_median", self.overestimate_median, 1, 1000)
        _check("overestimate_sigma", self.overestimate_sigma, 0, 5)
        limit = math.sqrt(1 - self.run_variance_share)
        if abs(self.gpu_duration_corr) > limit + 1e-12:
            raise DeepShareError(
                f"recurrence model: gpu_duration_corr must be within ±sqrt(1 - run_variance_share) = ±{limit:.4g} "
                f"(GPU counts are per group, so only the group part of a duration can follow them), "
                f"got {self.gpu_duration_corr!r}; lower gpu_duration_corr or run_variance_share"
            )


@dataclass(frozen=True)
class JobFeatures:
    """Per-job draws of the model, in job (arrival) order."""

    gpus: list[int]
    durations: list[float]
    models: list[str]
    users: list[str]
    groups: list[str]
    requested: list[float | None]


def gpu_quantiles(demand: Mapping[int, float]) -> tuple[list[int], list[float]]:
    """GPU sizes in increasing order and the standard-normal edges between them.

    A latent ``U`` gives ``sizes[searchsorted(edges, U)]``, which has exactly the demand
    distribution when ``U`` is standard normal.
    """
    sizes = sorted(demand)
    total = math.fsum(demand.values())
    cumulative = np.cumsum([demand[g] / total for g in sizes])[:-1]
    return sizes, [_STANDARD.inv_cdf(min(max(c, 1e-300), 1 - 1e-16)) for c in cumulative]


def mean_gpu_seconds(demand: Mapping[int, float], median_s: float, sigma: float, corr: float) -> float:
    """``E[gpus x duration]`` when log duration and the GPU latent have correlation ``corr``,
    durations capped at a year as they are drawn (:func:`capped`).

    For ``Z = corr * U + sqrt(1 - corr**2) * W``: ``E[exp(sigma Z); a < U <= b] =
    exp(sigma**2 / 2) * (Phi(b - sigma corr) - Phi(a - sigma corr))``.
    """
    sizes, edges = gpu_quantiles(demand)
    shift = sigma * corr
    bounds = [-math.inf, *edges, math.inf]
    cdf = [0.0 if b == -math.inf else 1.0 if b == math.inf else _STANDARD.cdf(b - shift) for b in bounds]
    uncapped = median_s * math.exp(sigma**2 / 2) * math.fsum(g * (hi - lo) for g, lo, hi in zip(sizes, cdf, cdf[1:]))
    return capped(uncapped, max(sizes) * lognormal_excess(math.log(median_s), sigma),
                  lambda: _correlated_excess(sizes, edges, median_s, sigma, corr))


CAP_EFFECT = 1e-6
"""Relative change of ``E[gpus x duration]`` (a millionth of the load) below which the year's cap
is left out of it: the cap then moves only a far tail, and leaving it out keeps the traces
generated before the cap was counted the same, bit for bit (every bundled suite's and training
config's, whose sigma is 1: their cap moves the mean by less than 1e-10)."""


def capped(uncapped: float, bound: float, excess: Callable[[], float]) -> float:
    """``uncapped`` (``E[gpus x duration]`` without the cap) less ``excess()`` (what the year's
    cap takes off it, ``E[gpus x (duration - cap)+]``), unless ``bound`` (at least the excess)
    is below :data:`CAP_EFFECT` of it. Without the cap a median of an hour and sigma 3 asked
    for load 1 made a trace of load 0.63: draws past a year are cut to a year, so the jobs
    brought less work than the rate assumed."""
    if bound <= CAP_EFFECT * uncapped:
        return uncapped
    return uncapped - excess()


def lognormal_excess(mu: float, sigma: float, cap: float = MAX_DURATION_S) -> float:
    """``E[(exp(mu + sigma W) - cap)+]`` for a standard normal ``W``: what capping a lognormal
    draw at ``cap`` takes off its mean."""
    if sigma == 0:
        return max(0.0, math.exp(mu) - cap)
    log_cap = math.log(cap)
    return max(0.0, math.exp(mu + sigma**2 / 2) * _lower_tail((mu + sigma**2 - log_cap) / sigma)
               - cap * _lower_tail((mu - log_cap) / sigma))


def _lower_tail(x: float) -> float:
    """``Phi(x)`` accurate to the last bits for negative ``x`` too (``NormalDist.cdf`` computes
    ``(1 + erf)/2`` and keeps only an absolute 1e-16 there: a year times that swamped the excess
    of a median of picoseconds)."""
    return 0.5 * math.erfc(-x / math.sqrt(2))


_LATENT_GRID = np.linspace(-12.0, 12.0, 24_001)
"""Points of the GPU latent the correlated cap's excess is integrated over (trapezoids)."""


def _correlated_excess(sizes: list[int], edges: list[float], median_s: float, sigma: float, corr: float) -> float:
    """``E[gpus x (duration - cap)+]`` with log duration correlated ``corr`` with the GPU latent
    ``U``: given ``U = u``, log duration is normal with mean ``log median + sigma corr u`` and
    sigma ``sigma sqrt(1 - corr**2)``; integrated over ``u`` numerically (only when the cap
    matters, :func:`capped`)."""
    spread = sigma * math.sqrt(max(0.0, 1 - corr**2))
    mu = math.log(median_s)
    lo_end, hi_end = float(_LATENT_GRID[0]), float(_LATENT_GRID[-1])
    step = float(_LATENT_GRID[1] - _LATENT_GRID[0])
    ends = [lo_end, *(min(max(e, lo_end), hi_end) for e in edges), hi_end]
    total = []
    for g, lo, hi in zip(sizes, ends, ends[1:]):  # each size's band of U on its own: the step between
        if hi <= lo:                               # sizes cost a trapezoid that straddled it 1e-4 of the mean
            continue
        u = np.linspace(lo, hi, max(3, math.ceil((hi - lo) / step) + 1))
        excess = np.array([lognormal_excess(mu + sigma * corr * x, spread) for x in u.tolist()])
        total.append(g * float(np.trapezoid(np.exp(-u**2 / 2) / math.sqrt(2 * math.pi) * excess, u)))
    return math.fsum(total)


def _group_of_each_job(n: int, model: RecurrenceModel, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Group index of each job (numbered by first appearance) and the number of groups."""
    recurring = np.flatnonzero(rng.random(n) < model.recurring_share)
    label = np.full(n, -1)
    if len(recurring) >= 2:
        sizes: list[int] = []
        p = 1.0 / (model.runs_per_group - 1.0)
        while sum(sizes) < len(recurring):
            sizes.extend((1 + rng.geometric(p, size=max(1, len(recurring) // 2))).tolist())
        cut = int(np.searchsorted(np.cumsum(sizes), len(recurring)))  # the group that reaches the count
        sizes = sizes[: cut + 1]
        sizes[-1] -= sum(sizes) - len(recurring)
        if sizes[-1] == 1:  # a group of one is not recurring: give its run to the previous group
            last = sizes.pop()
            sizes[-1] += last
        owners = np.repeat(np.arange(len(sizes)), sizes)
        slots = rng.permutation(len(recurring))  # owners[k] runs at recurring[slots[k]]
        if model.burst_share > 0:
            slots = _bursts(slots, owners, len(sizes), model.burst_share, rng)
        label[recurring[slots]] = owners
    singles = label < 0
    label[singles] = label.max(initial=-1) + 1 + np.arange(int(singles.sum()))
    _, first = np.unique(label, return_index=True)  # labels are 0..L-1; first: where each appears first
    rank = np.argsort(np.argsort(first))  # label -> rank of its first appearance
    return rank[label], len(first)


def _bursts(slots: np.ndarray, owners: np.ndarray, n_groups: int, share: float, rng: np.random.Generator) -> np.ndarray:
    """``slots`` with each bursting group's runs moved to consecutive slots from its first one
    (module doc); the other groups keep their relative order."""
    bursting = rng.random(n_groups) < share
    first = np.full(n_groups, len(slots))
    np.minimum.at(first, owners, slots)
    run = np.arange(len(slots)) - np.searchsorted(owners, owners)  # a run's index within its group
    # sort key: a spread run keeps its slot, a burst run sits just after its group's first slot
    key = np.where(bursting[owners], first[owners] + run / (len(slots) + 1.0), slots.astype(float))
    out = np.empty_like(slots)
    out[np.argsort(key, kind="stable")] = np.arange(len(slots))
    return out


def draw_features(
    n: int,
    model: RecurrenceModel,
    demand: Mapping[int, float],
    median_s: float,
    sigma: float,
    mix: ModelMix,
    streams: Sequence[np.random.Generator],
) -> JobFeatures:
    """The model's draws for ``n`` jobs from seven streams.

    ``streams``: GPU latents, group medians, models, group structure, users, run spread,
    time limits (each ingredient its own stream, so changing one leaves the others alone).
    """
    gpu_rng, median_rng, model_rng, structure_rng, user_rng, run_rng, limit_rng = streams
    group, n_groups = _group_of_each_job(n, model, structure_rng)
    sizes, edges = gpu_quantiles(demand)
    latent = gpu_rng.standard_normal(n_groups)
    group_gpus = np.asarray(sizes)[np.searchsorted(edges, latent)]
    between = math.sqrt(1 - model.run_variance_share)
    tie = model.gpu_duration_corr / between if between > 0 else 0.0
    group_z = tie * latent + math.sqrt(max(0.0, 1 - tie**2)) * median_rng.standard_normal(n_groups)
    run_z = run_rng.standard_normal(n)
    durations = np.clip(  # within a trace's bounds, as its reader checks them: a picosecond to a year
        median_s * stable_math.exp(sigma * (between * group_z[group] + math.sqrt(model.run_variance_share) * run_z)),
        MIN_WORK_S, MAX_DURATION_S,
    )
    weights = np.arange(1, model.users + 1, dtype=float) ** -model.user_skew
    group_user = user_rng.choice(model.users, size=n_groups, p=weights / weights.sum())
    group_model = assign(n_groups, mix, model_rng)
    asks = limit_rng.random(n) < model.requested_share
    factor = model.overestimate_median * stable_math.exp(model.overestimate_sigma * limit_rng.standard_normal(n))
    requested = np.minimum(durations * np.maximum(1.0, factor), MAX_DURATION_S)
    width = len(str(model.users - 1))
    return JobFeatures(
        gpus=[int(group_gpus[g]) for g in group],
        durations=[float(d) for d in durations],
        models=[group_model[g] for g in group],
        users=[f"user-{group_user[g]:0{width}d}" for g in group],
        groups=[f"grp-{g:05d}" for g in group],
        requested=[float(r) if a else None for r, a in zip(requested, asks)],
    )
