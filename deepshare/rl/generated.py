"""Generated episodes: the Poisson trace a generated training episode runs and the cluster it runs on.

By default (:class:`~deepshare.rl.env.EnvConfig`'s ``generated_*`` fields at their defaults) an
episode draws one of ``generated_nodes`` uniform testbed clusters, a load, a mix and a trace seed,
and runs ``generated_jobs`` jobs of the generator's default demand: the draws the env always made,
in the same order, so those episodes are bit-identical to what they were before the fabric fields
existed (``tests/rl/test_rollout_equivalence.py``).

The fabric fields let training episodes be drawn the way a suite's cells are
(``deepshare.experiments.suite_cells.cell_trace``, a layer above this one): ``generated_clusters``
draws a cluster preset (a multi-level fabric) in place of a uniform size, ``generated_jobs_per_node``
sizes the trace by the preset's nodes, and ``generated_demand``, the required/preferred topology
requests and ``generated_duration_sigma`` are the suite's ``demand``, ``required_*``,
``preferred_*`` and ``duration_sigma``. With a suite's values the episode drawn with trace seed
``s`` has exactly the jobs of that suite's cell with seed ``s`` (``tests/rl/test_env_generated_fabric.py``);
only the seeds differ: training draws them below :data:`TRAINING_SEED_LIMIT`, the suites' held-out
traces use it and up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from deepshare.core.bounds import MAX_GENERATED_JOBS
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.topology import Topology, load_topology, uniform
from deepshare.core.traces import MIX_PRESETS, RecurrenceModel, generate, mix_preset
from deepshare.core.traces.generator import check_demand_fits, parse_demand, topology_asks
from deepshare.core.types import JobSpec

TRAINING_SEED_LIMIT = 2**31
"""Generated trace seeds are drawn below it; the suites' traces use seeds from it up
(``deepshare.experiments.suite_spec.SUITE_SEED_BASE``), so no training trace is a held-out one."""
GENERATED_GPUS_PER_NODE = 8
"""GPUs per node of ``generated_nodes``' uniform testbed clusters."""


@dataclass(frozen=True)
class GeneratedEpisode:
    """A generated episode's scenario and what it was drawn with: enough to name the suite cell
    whose trace it equals (its cluster, load, mix and seed)."""

    topology: Topology
    jobs: tuple[JobSpec, ...]
    """The drawn trace (before any training cap on an episode's jobs)."""
    cluster: str
    """The preset drawn from ``generated_clusters``; "" for a ``generated_nodes`` uniform cluster."""
    load: float
    mix: str
    seed: int
    """The generator's trace seed (below :data:`TRAINING_SEED_LIMIT`)."""


def generated_presets(config: Any) -> tuple[Topology, ...]:
    """``config.generated_clusters`` loaded, in order (an unknown preset or a bad spec file is a
    DeepShareError naming the field)."""
    presets = []
    for name in config.generated_clusters:
        if not isinstance(name, str) or not name:
            raise DeepShareError(f"env config: generated_clusters: expected cluster preset names or spec files, got {name!r}")
        try:
            presets.append(load_topology(name))
        except DeepShareError as exc:
            raise DeepShareError(f"env config: generated_clusters: {exc}") from None
    return tuple(presets)


def check_generated(config: Any) -> None:
    """Validate an :class:`~deepshare.rl.env.EnvConfig`'s generated-episode fields; a
    DeepShareError names the bad field. (``config`` is typed loosely: env.py imports this module.)"""
    presets = generated_presets(config)
    jobs = config.generated_jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_GENERATED_JOBS:
        raise DeepShareError(f"env config: generated_jobs: expected an integer from 1 to {MAX_GENERATED_JOBS:,} "
                             f"(as trace generate --jobs), got {shown(jobs)}")
    mixes = config.generated_mixes
    if not mixes or any(m not in MIX_PRESETS for m in mixes):
        raise DeepShareError(f"env config: generated_mixes: expected one or more of {', '.join(MIX_PRESETS)}, "
                             f"got {shown(list(mixes))}")
    if not config.generated_nodes and not presets:
        raise DeepShareError("env config: generated_nodes: expected one or more node counts (or generated_clusters "
                             "in their place), got []")
    per_node = config.generated_jobs_per_node
    if per_node is not None and (isinstance(per_node, bool) or not isinstance(per_node, int) or not 1 <= per_node <= 1000):
        raise DeepShareError(f"env config: generated_jobs_per_node must be an integer from 1 to 1000 or null, got {per_node!r}")
    sigma = config.generated_duration_sigma
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not (math.isfinite(sigma) and 0 <= sigma <= 5):
        raise DeepShareError(f"env config: generated_duration_sigma must be a number from 0 to 5, got {sigma!r}")
    # The clusters a generated episode can run on, for the demand's and the levels' checks.
    clusters = [(name, t) for name, t in zip(config.generated_clusters, presets)] if presets else [
        (f"{n} nodes", uniform(n, GENERATED_GPUS_PER_NODE)) for n in config.generated_nodes
        if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    if config.generated_demand is not None:
        if not isinstance(config.generated_demand, str):
            raise DeepShareError(f"env config: generated_demand must be 'gpus:weight,...', a preset name or null, "
                                 f"got {config.generated_demand!r}")
        try:
            check_demand_fits(config.generated_demand, [(where, t.total_gpus) for where, t in clusters])
        except DeepShareError as exc:
            raise DeepShareError(f"env config: generated_demand: {exc}") from None
    try:
        asked = topology_asks(config.generated_required_level, config.generated_required_share,
                              config.generated_preferred_level, config.generated_preferred_share, prefix="generated_")
    except DeepShareError as exc:
        raise DeepShareError(f"env config: {exc}") from None
    for kind, level, _share in asked:
        for where, topology in clusters:
            try:
                topology.fabric.level_index(level)
            except DeepShareError as exc:
                raise DeepShareError(f"env config: generated_{kind}_level: {exc} ({where})") from None


def draw_generated(config: Any, rng: np.random.Generator, presets: Sequence[Topology]) -> GeneratedEpisode:
    """A generated episode for :class:`~deepshare.rl.env.EnvConfig` ``config``, drawn from
    ``rng``: a cluster (one of ``presets``, ``config.generated_clusters`` loaded, when there are
    any; else a ``generated_nodes`` size), a load, a mix and a trace seed, in that order (the
    draws the env made before the fabric fields existed, when they are at their defaults)."""
    if presets:
        index = int(rng.integers(len(presets)))
        cluster, topology = config.generated_clusters[index], presets[index]
    else:
        cluster, topology = "", uniform(int(rng.choice(config.generated_nodes)), GENERATED_GPUS_PER_NODE)
    load = float(rng.choice(config.generated_loads))
    mix = str(rng.choice(config.generated_mixes))
    seed = int(rng.integers(TRAINING_SEED_LIMIT))
    return GeneratedEpisode(topology, generated_trace(config, topology, load, mix, seed), cluster, load, mix, seed)


def generated_trace(config: Any, topology: Topology, load: float, mix: str, seed: int) -> tuple[JobSpec, ...]:
    """The jobs of ``config``'s generated trace on ``topology`` at ``load`` of ``mix`` with trace
    seed ``seed``: ``generated_jobs_per_node`` x its nodes jobs (else ``generated_jobs``), the
    configured demand, topology requests, duration sigma and recurrence (what a suite's
    ``cell_trace`` passes the generator, read from the env's fields)."""
    per_node = config.generated_jobs_per_node
    demand = config.generated_demand
    trace = generate(
        config.generated_jobs if per_node is None else per_node * len(topology.nodes),
        load=load,
        total_gpus=topology.total_gpus,
        demand=None if demand is None else parse_demand(demand, topology.total_gpus),
        mix=mix_preset(mix),
        duration_sigma=config.generated_duration_sigma,
        seed=seed,
        recurrence=None if config.generated_recurrence is None else RecurrenceModel(**config.generated_recurrence),
        required_level=config.generated_required_level,
        required_share=config.generated_required_share,
        preferred_level=config.generated_preferred_level,
        preferred_share=config.generated_preferred_share,
    )
    return tuple(trace.jobs)
