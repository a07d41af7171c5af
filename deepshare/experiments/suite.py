"""The benchmark suite: policies judged on a grid of generated scenarios, not on one trace.

A suite file (``deepshare/data/suites/NAME.yaml`` or any path) names the grid: offered loads,
model mixes, cluster sizes (nodes x GPUs per node of the testbed's node type), contention
models and trace seeds, the heuristics and the learned policies. Every combination is a
*cell*: one generated Poisson trace (:func:`deepshare.core.traces.generate`, lognormal
durations with ``duration_sigma``) simulated under every policy.

Per cell the *best heuristic* is the one with the least average JCT; a learned policy's ratios
are its average JCT / that heuristic's and its p99 JCT / that heuristic's p99. The summary gives
each learned policy's geometric-mean average-JCT ratio over the cells and its worst cells.

Room: per cell the suite also computes a *lower bound* on the average JCT that no scheduler can
beat (:mod:`deepshare.core.jct_bound`: every job runs at its fastest isolated placement the
moment it arrives, no queueing, no contention). ``room`` = bound / best heuristic's average JCT is
the ratio a perfect scheduler would reach against that heuristic (an optimistic limit: the true
optimum lies between). Its geometric mean over the cells says how low any policy's
geometric-mean ratio could go: when it is near 1 the traces hardly queue and no policy can beat
the heuristics by much there.

Pooled ideal: the bound ignores queueing, which on a loaded trace is most of a JCT. Per trace the
suite also runs the *pooled ideal* (:mod:`deepshare.experiments.pooled_ideal`): the same jobs on
one node of all the cluster's GPUs, no contention, free preemption, shortest remaining
GPU-service first on the true sizes (whatever the cell's information model). ``best_over_pooled``
= best heuristic / pooled ideal is what nodes, contention, restores and not knowing the sizes cost
the best heuristic over an ideal SRSF (a reference, not a bound: a gang wider than a node runs
there at the one-node speed extrapolated, so it can be below :func:`cell_bound`).

Information models: a suite lists the ``durations`` its cells run under (``exact``,
``estimated``, ``unknown``: :mod:`deepshare.core.information`); each is a cell of its own on the
same trace, with its own best heuristic, so every policy is judged against the best heuristic
that knew what it knew. ``cost_of_not_knowing`` = a cell's best heuristic's average JCT / the
best heuristic's of the same scenario under ``exact`` (when the suite lists ``exact``): what not
knowing job lengths costs the strongest rule. Estimates are drawn with the cell's trace seed, so
every policy of a cell sees the same ones.

Contention knowledge: a suite lists the ``contention_knowledge`` its cells run under (``exact``:
predictions from the simulation's own model; ``learned``: from a model fitted online to measured
throughputs, :mod:`deepshare.core.contention.learned`); each is a cell of its own on the same trace,
like ``durations``. ``perturb_contention: S`` runs every cell's simulation on a world whose
sensitivities are drawn within ``1 +- S`` of the shipped ones (:mod:`deepshare.core.contention.world`,
seed ``perturb_seed``), so that learning has something to learn; ``exact`` cells then know the
perturbed truth. ``learned_over_exact`` = a policy's average JCT under ``learned`` / its own under
``exact`` on the same scenario: what learning contention instead of knowing it costs the policy.

Seeds: training draws its generated traces' seeds from ``[0, 2**31)`` (``deepshare/rl/env.py``:
``rng.integers(2**31)``), so suite traces use seeds from :data:`SUITE_SEED_BASE` = ``2**31`` up:
no suite trace is ever a training trace. A cell's trace depends on (load, mix, cluster size,
seed) only, so the ``profiled`` and ``link`` cells of the same scenario share one trace.

Runs are deterministic: the simulator and the policies are, every (cell, policy) run is
independent, and results are keyed by cell and policy, so ``workers`` > 1 (processes) and
``on_ray`` (one Ray task per run across a cluster, :mod:`deepshare.experiments.ray_runs`) give
the same numbers as one process.

Tenants: a suite may name a tenants file (``tenants:``, :func:`~deepshare.experiments.suite_spec.suite_tenants`);
every policy then runs behind its admission (:class:`~deepshare.tenants.Admitted`) and each run
keeps its fairness beside the JCTs (:meth:`~deepshare.tenants.fairness.FairnessReport.metrics`);
the results add each cell's Pareto fronts of average JCT against worst rho and against the share
of jobs with rho > 1, and the trade-off over the cells
(:meth:`~deepshare.experiments.suite_results.SuiteResult.tradeoff`, plotted by
:mod:`~deepshare.experiments.pareto_plot`). Without one, the JSON is as it always was.

Failures: a run that raises is kept as a failed result (every metric None and its ``error``),
shown in the tables and the JSON (``"failed"``), never dropped; the cells where a policy or the
best heuristic failed are left out of that policy's summary (``failed_cells`` counts them).

This module is the suite's front door: the spec (:mod:`~deepshare.experiments.suite_spec`), the
cells (:mod:`~deepshare.experiments.suite_cells`), the runs (:mod:`~deepshare.experiments.suite_runs`)
and the results (:mod:`~deepshare.experiments.suite_results`) each live in a module of their own
and are all importable from here.
"""

from __future__ import annotations

from deepshare.experiments.suite_cells import (
    Cell, cell_bound, cell_contention, cell_pooled_ideal, cell_topology, cell_trace, cells, pooled_ideals,
)
from deepshare.experiments.suite_results import SuiteResult, geomean
from deepshare.experiments.suite_runs import (
    FABRIC_METRICS, METRICS, failed_run, failure_text, run_guarded, run_on_worker, run_one, run_policies, run_suite,
)
from deepshare.experiments.suite_spec import SUITE_SEED_BASE, SuiteSpec, load_suite, suite_names

__all__ = [
    "Cell", "FABRIC_METRICS", "METRICS", "SUITE_SEED_BASE", "SuiteResult", "SuiteSpec", "cell_bound", "cell_contention",
    "cell_pooled_ideal", "cell_topology", "cell_trace", "cells", "failed_run", "failure_text", "geomean", "load_suite",
    "pooled_ideals", "run_guarded", "run_on_worker", "run_one", "run_policies", "run_suite", "suite_names",
]
