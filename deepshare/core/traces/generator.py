"""Synthetic traces: Poisson arrivals, a GPU-demand distribution, lognormal durations.

* Arrivals: the first job arrives at t = 0 and each next one an exponential gap (mean
  ``1 / rate_per_s``) later, so ``n`` jobs span ``n - 1`` gaps. The rate is given directly, or
  derived from an offered ``load`` on ``total_gpus`` GPUs::

      load = rate * E[gpus * duration] / total_gpus
      E[gpus * duration] = E[gpus] * E[min(median * exp(sigma Z), a year)]   (independent draws)

  using the distributions' expected values (not the sample's), so the conversion is exact; the
  year's cap on a draw is counted where it moves the mean by more than a millionth of it
  (:func:`~deepshare.core.traces.recurrence.capped`: from sigma 2 with a median of an hour, or
  a median near a year), otherwise the uncapped ``E[gpus] * median * exp(sigma**2 / 2)``.
  With neither, every job arrives at t = 0 (the artifact's setting).
* Demand: GPUs drawn from ``demand`` ({gpus: weight}, weights relative; GPU counts from 1 to
  :data:`~deepshare.core.bounds.MAX_JOB_GPUS`).
* Durations (isolated run time, seconds): lognormal with the given median and ``sigma`` (the
  standard deviation of the log); ``sigma`` 0 gives exactly the median. A draw past a year is
  capped at a year (:data:`~deepshare.core.bounds.MAX_DURATION_S`, the domain of
  :class:`~deepshare.core.types.JobSpec`), so the median must be at most a year.
* Models: drawn from ``mix`` (default: the ``random`` preset).
* Topology requests (optional): a ``required_share`` of the jobs asks for all of its GPUs inside
  one domain of ``required_level``, a ``preferred_share`` (of all jobs, drawn apart from the
  required ones) prefers ``preferred_level``; the rest ask nothing. Each job is drawn on its own
  (runs of one recurring group too) from a stream of its own, so the shares move no other draw.
  For a gang-heavy mix pair it with :data:`DEMAND_PRESETS` ``gang-heavy``.
* With a :class:`~deepshare.core.traces.recurrence.RecurrenceModel`: users, recurring groups
  (one user, model and GPU count each), time limits (``requested_s``) and durations correlated
  with GPU counts, keeping the demand and duration distributions above exactly; ``E[gpus *
  duration]`` then accounts for the correlation. Without one, traces are exactly what they were
  before the model existed, for every seed.

Each ingredient draws from its own stream spawned from ``seed``, so changing, say, the mix does
not move the arrivals (nor does turning the recurrence model on, nor asking for topology
requests: without them traces are what they were before they existed). Job ids are ``job-00000``,
``job-00001``, ...
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping

import numpy as np

from deepshare.core import stable_math
from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_TIMESTAMP_S, MIN_WORK_S
from deepshare.core.traces.base import Trace, finish
from deepshare.core.traces.mixes import ModelMix, assign, mix_preset
from deepshare.core.traces.recurrence import (
    JobFeatures, RecurrenceModel, capped, draw_features, lognormal_excess, mean_gpu_seconds,
)
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog
from deepshare.core.written import NUMBER

FORMAT = "generated"
DEFAULT_DEMAND: Mapping[int, float] = {2: 1 / 3, 4: 1 / 3, 8: 1 / 3}
_INFINITE_TOTAL = "weights must add up to a finite number (they are relative: try 1, 2, ...)"

DEMAND_PRESETS: Mapping[str, Mapping[int, float]] = {
    "gang-heavy": {16: 4.0, 32: 3.0, 64: 2.0, 128: 1.0, 256: 0.5},
}
"""Named GPU-demand distributions ``--demand`` accepts besides ``gpus:weight,...``.

``gang-heavy``: only multi-node gangs, 16 to 256 GPUs, fewer as they grow (weights 4, 3, 2, 1,
0.5: 38% of jobs at 16 GPUs, 5% at 256; mean 51.8 GPUs). An assumption shaped after published
job-size distributions, not fitted to any: Philly (Jeon et al., ATC'19) and Helios (Hu et al.,
SC'21) report most jobs take 1-8 GPUs but most GPU-time goes to the few large ones, and Acme's
LLM clusters (Hu et al., NSDI'24) run pretraining jobs of hundreds to thousands of GPUs. It is
the large-job tail alone, for studying gang placement and topology requests, not a whole
cluster's mix (mix it with small jobs through ``gpus:weight`` for that)."""
_TOPOLOGY_STREAM = 8
"""Index of the topology requests' stream among ``SeedSequence(seed)``'s children (0-7 are the
other ingredients'; children are spawned by index, so none of theirs moves)."""


def parse_demand(text: str, cluster_gpus: int | None = None) -> dict[int, float]:
    """``"2:0.3,4:0.4,8:0.3"`` -> ``{2: 0.3, 4: 0.4, 8: 0.3}`` (weights are relative).

    GPU counts are integers from 1 to :data:`~deepshare.core.bounds.MAX_JOB_GPUS`, and at most
    ``cluster_gpus`` when the cluster is known: a job larger than the cluster could never run.
    A name of :data:`DEMAND_PRESETS` (``gang-heavy``) gives that preset.
    """
    preset = DEMAND_PRESETS.get(text.strip())
    if preset is not None:
        largest = max(preset)
        if cluster_gpus is not None and largest > cluster_gpus:
            raise DeepShareError(
                f"GPU demand {text.strip()!r}: its largest jobs ({largest} GPUs) are more than the cluster's "
                f"{cluster_gpus}; such a job could never run"
            )
        return dict(preset)
    demand: dict[int, float] = {}
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise DeepShareError(f"GPU demand {text!r}: expected 'gpus:weight,...', e.g. '2:0.3,4:0.4,8:0.3'")
    for entry in entries:
        gpus, sep, weight = entry.partition(":")
        if not sep:
            raise DeepShareError(f"GPU demand {text!r}: entry {entry!r}: expected 'gpus:weight'")
        g = int(gpus) if re.fullmatch(r"\s*[0-9]{1,9}\s*", gpus) else 0
        if not 1 <= g <= MAX_JOB_GPUS:
            raise DeepShareError(
                f"GPU demand {text!r}: entry {entry!r}: GPUs must be a positive integer up to {MAX_JOB_GPUS:,}, "
                f"got {gpus.strip()!r}"
            )
        if cluster_gpus is not None and g > cluster_gpus:
            raise DeepShareError(
                f"GPU demand {text!r}: entry {entry!r}: {g} GPUs is more than the cluster's {cluster_gpus}; "
                "such a job could never run"
            )
        w = float(weight) if NUMBER.fullmatch(weight.strip()) else math.nan  # float() also reads '1_0' and '١'
        if not (math.isfinite(w) and w > 0):
            raise DeepShareError(f"GPU demand {text!r}: entry {entry!r}: weight must be a positive number, got {weight.strip()!r}")
        if g in demand:
            raise DeepShareError(f"GPU demand {text!r}: {g} GPUs is given twice")
        demand[g] = w
    if not math.isfinite(sum(demand.values())):
        raise DeepShareError(f"GPU demand {text!r}: {_INFINITE_TOTAL}")
    return demand


def _check_demand(demand: Mapping[int, float]) -> dict[int, float]:
    if not demand:
        raise DeepShareError("GPU demand: expected at least one 'gpus: weight' entry")
    out = {}
    for g, w in demand.items():
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 <= g <= MAX_JOB_GPUS:
            raise DeepShareError(f"GPU demand: GPUs must be positive integers up to {MAX_JOB_GPUS:,}, got {g!r}")
        if not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
            raise DeepShareError(f"GPU demand: weight of {g} GPUs must be a positive number, got {w!r}")
        out[int(g)] = float(w)
    if not math.isfinite(sum(out.values())):
        raise DeepShareError(f"GPU demand: {_INFINITE_TOTAL}")
    return out


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise DeepShareError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def rate_for_load(
    load: float,
    total_gpus: int,
    demand: Mapping[int, float],
    median_duration_s: float,
    duration_sigma: float,
    gpu_duration_corr: float = 0.0,
) -> float:
    """Arrival rate (jobs/s) that offers ``load`` (busy GPU fraction) to ``total_gpus`` GPUs.

    ``gpu_duration_corr``: the recurrence model's correlation of log duration with GPU count
    (0: independent draws).
    """
    demand = _check_demand(demand)
    if gpu_duration_corr == 0:
        total = math.fsum(demand.values())
        mean_gpus = math.fsum(g * w for g, w in demand.items()) / total
        uncapped = mean_gpus * (median_duration_s * math.exp(duration_sigma**2 / 2))  # the pre-recurrence rounding
        excess = mean_gpus * lognormal_excess(math.log(median_duration_s), duration_sigma)  # independent of the GPUs
        mean_gpu_s = capped(uncapped, excess, lambda: excess)
    else:
        mean_gpu_s = mean_gpu_seconds(demand, median_duration_s, duration_sigma, gpu_duration_corr)
    return load * total_gpus / mean_gpu_s


def _recurring_jobs(submits: np.ndarray, drawn: JobFeatures, requests: list[TopologyRequest]) -> list[JobSpec]:
    return [
        JobSpec(
            f"job-{i:05d}", drawn.models[i], drawn.gpus[i], float(t), duration_s=drawn.durations[i],
            user=drawn.users[i], group=drawn.groups[i], requested_s=drawn.requested[i], topology=requests[i],
        )
        for i, t in enumerate(submits)
    ]


def _share(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and 0 <= value <= 1):
        raise DeepShareError(f"{name} must be a number from 0 to 1, got {value!r}")
    return float(value)


def topology_asks(required_level: Any, required_share: Any, preferred_level: Any, preferred_share: Any,
                  prefix: str = "") -> list[tuple[str, str, float]]:
    """The ``(kind, level, share)`` that a generated trace's jobs ask for, checked: each level and
    share given both or neither, a level a name, a share from 0 to 1, the two shares at most 1 in
    all. A DeepShareError names the field as ``{prefix}{kind}_level`` / ``_share`` (the env config
    calls them ``generated_...``). Whether a level exists is the cluster's to say."""
    asked = []
    for kind, level, share in (("required", required_level, required_share), ("preferred", preferred_level, preferred_share)):
        name = f"{prefix}{kind}"
        if (level is None) != (share is None):
            raise DeepShareError(f"{name}_level and {name}_share go together: give both or neither")
        if level is not None:
            if not isinstance(level, str) or not level.strip() or level != level.strip():
                raise DeepShareError(f"{name}_level must be a level's name, got {level!r}")
            asked.append((kind, level, _share(f"{name}_share", share)))
    if math.fsum(share for *_, share in asked) > 1:
        raise DeepShareError(f"{prefix}required_share plus {prefix}preferred_share must be at most 1 "
                             "(a job asks one or the other)")
    return asked


def check_demand_fits(demand: str, clusters: Iterable[tuple[str, int]]) -> None:
    """``demand`` (``gpus:weight,...`` or a preset) parses for each ``(where, total GPUs)`` of
    ``clusters``; else a DeepShareError that says where it does not fit."""
    parse_demand(demand)
    for where, total_gpus in clusters:
        try:
            parse_demand(demand, total_gpus)
        except DeepShareError as exc:
            raise DeepShareError(f"{exc} ({where})") from None


def _topology_requests(
    n: int, seed: int, required_level: str | None, required_share: float | None,
    preferred_level: str | None, preferred_share: float | None,
) -> tuple[list[TopologyRequest], str]:
    """Each job's request (see the module doc) and how the trace's source names them ("" for none)."""
    asked = topology_asks(required_level, required_share, preferred_level, preferred_share)
    if not asked:
        return [NO_TOPOLOGY] * n, ""
    # Drawn only here, from a stream of its own: traces without requests are what they were.
    u = np.random.default_rng(np.random.SeedSequence(seed).spawn(_TOPOLOGY_STREAM + 1)[_TOPOLOGY_STREAM]).random(n)
    requests = [NO_TOPOLOGY] * n
    low = 0.0
    for kind, level, share in asked:
        request = TopologyRequest(**{f"{kind}_level": level})
        for i in np.flatnonzero((u >= low) & (u < low + share)):
            requests[i] = request
        low += share
    return requests, ", " + ", ".join(f"{kind}={level}:{share:g}" for kind, level, share in asked)


def generate(
    n_jobs: int,
    *,
    rate_per_s: float | None = None,
    load: float | None = None,
    total_gpus: int | None = None,
    demand: Mapping[int, float] | None = None,
    mix: ModelMix | None = None,
    median_duration_s: float = 3600.0,
    duration_sigma: float = 0.0,
    seed: int = 0,
    catalog: Catalog | None = None,
    recurrence: RecurrenceModel | None = None,
    required_level: str | None = None,
    required_share: float | None = None,
    preferred_level: str | None = None,
    preferred_share: float | None = None,
) -> Trace:
    """A synthetic trace of ``n_jobs`` jobs (see the module doc); deterministic for a seed.

    ``required_level`` / ``required_share`` and ``preferred_level`` / ``preferred_share`` (each
    pair both or neither; shares from 0 to 1, adding up to at most 1): the share of jobs whose
    topology request requires or prefers one domain of that level (names unchecked here: the
    cluster's fabric says which exist)."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs <= 0:
        raise DeepShareError(f"n_jobs must be a positive integer, got {n_jobs!r}")
    demand = _check_demand(DEFAULT_DEMAND if demand is None else demand)
    median = _positive("median_duration_s", median_duration_s)
    if median > MAX_DURATION_S:
        raise DeepShareError(f"median_duration_s must be at most a year ({MAX_DURATION_S:,.0f} s), got {median!r}")
    if isinstance(duration_sigma, bool) or not isinstance(duration_sigma, (int, float)) or not (
        math.isfinite(duration_sigma) and duration_sigma >= 0
    ):
        raise DeepShareError(f"duration_sigma must be a non-negative number, got {duration_sigma!r}")
    if rate_per_s is not None and load is not None:
        raise DeepShareError("give either rate_per_s or load, not both")
    if recurrence is not None and not isinstance(recurrence, RecurrenceModel):
        raise DeepShareError(f"recurrence must be a RecurrenceModel or None, got {type(recurrence).__name__}")
    if load is not None:
        _positive("load", load)
        if total_gpus is None or isinstance(total_gpus, bool) or not isinstance(total_gpus, (int, np.integer)) or total_gpus <= 0:
            raise DeepShareError(f"load needs total_gpus, a positive integer; got {total_gpus!r}")
        corr = 0.0 if recurrence is None else recurrence.gpu_duration_corr
        rate_per_s = rate_for_load(load, int(total_gpus), demand, median, duration_sigma, corr)
    elif rate_per_s is not None:
        _positive("rate_per_s", rate_per_s)
    mix = mix or mix_preset("random", catalog)
    requests, asked = _topology_requests(int(n_jobs), seed, required_level, required_share, preferred_level, preferred_share)

    # Streams 0-3 are the same with and without the recurrence model (spawn is by index).
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4 if recurrence is None else 8)]
    arrivals_rng, demand_rng, duration_rng, model_rng = streams[:4]
    n = int(n_jobs)
    if rate_per_s is None:
        submits = np.zeros(n)
    else:
        gaps = arrivals_rng.exponential(1.0 / rate_per_s, size=n - 1)
        submits = np.concatenate(([0.0], np.cumsum(gaps)))
        if submits[-1] > MAX_TIMESTAMP_S:  # named here, not as the first job past the bound
            given = f"load {load:g}" if load is not None else f"rate {rate_per_s:g} jobs/s"
            raise DeepShareError(f"{given}: {n:,} jobs arrive over {submits[-1]:.3g} s, past the latest submission time "
                                 f"a trace may hold ({MAX_TIMESTAMP_S:g} s); give a higher rate or load, or fewer jobs")
    how = "all at t=0" if rate_per_s is None else f"rate={rate_per_s:.6g}/s"
    if recurrence is not None:
        drawn = draw_features(n, recurrence, demand, median, duration_sigma, mix, streams[1:])
        return finish(_recurring_jobs(submits, drawn, requests), FORMAT,
                      f"generate(n_jobs={n}, {how}, seed={seed}, recurrence{asked})")
    sizes = list(demand)
    weights = np.array([demand[g] for g in sizes])
    gpus = [sizes[i] for i in demand_rng.choice(len(sizes), size=n, p=weights / weights.sum())]
    # within a trace's bounds, as its reader checks them: a picosecond (sigma 5 draws below it) to a year
    durations = np.clip(median * stable_math.exp(duration_sigma * duration_rng.standard_normal(n)), MIN_WORK_S, MAX_DURATION_S)
    models = assign(n, mix, model_rng)
    jobs = [
        JobSpec(f"job-{i:05d}", models[i], gpus[i], float(submits[i]), duration_s=float(durations[i]), topology=requests[i])
        for i in range(n)
    ]
    return finish(jobs, FORMAT, f"generate(n_jobs={n}, {how}, seed={seed}{asked})")
