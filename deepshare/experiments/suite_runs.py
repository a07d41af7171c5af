"""Running a suite: every policy on every cell, in one process, a pool of processes or as Ray
tasks, with the same numbers either way (see :mod:`deepshare.experiments.suite`). A run that
raises is kept as a failed result, never dropped.
"""

from __future__ import annotations

import os
from contextlib import closing
from multiprocessing.context import BaseContext
from typing import Any, Callable, Generator, Iterable, Sequence

from deepshare.core.simulator import Simulator
from deepshare.experiments.suite_cells import (
    Cell, cell_bound, cell_contention, cell_topology, cell_trace, cells, pooled_ideals,
)
from deepshare.experiments.suite_results import SuiteResult
from deepshare.experiments.suite_spec import SuiteSpec, suite_tenants

METRICS = ("avg_jct_s", "p99_jct_s", "gpu_util", "useful_util", "makespan_s", "finished")
FABRIC_METRICS = ("avg_slowdown", "fragmentation_share", "large_gang_avg_queue_s", "preemptions")
"""What a fabric preset's cells keep besides :data:`METRICS`, with ``cross_domain_share_<level>``
for each of its fabric levels."""


SPEC_TENANTS: Any = object()
"""``tenants`` of :func:`run_one` when none were passed: read from the suite's ``tenants`` field."""


def run_one(spec: SuiteSpec, cell: Cell, policy: str, tenants: Any = SPEC_TENANTS) -> dict[str, float | None]:
    """One policy on one cell: the metrics the suite keeps; with the suite's ``tenants``, the
    policy runs behind their admission and the run's fairness is kept too
    (:data:`~deepshare.tenants.fairness.FAIRNESS_METRICS` and ``"queues"``). A suite's runs get
    ``tenants`` as the driver read them (:func:`run_policies`): a worker never reads the file,
    which its machine may lack or hold in another version."""
    from deepshare.policies import make_policy

    if tenants is SPEC_TENANTS:
        tenants = suite_tenants(spec)
    topology, jobs = cell_topology(cell), cell_trace(spec, cell)
    built = make_policy(policy)
    if tenants is not None:
        from deepshare.tenants import admitted

        tenants.check_jobs(jobs)  # a job no queue can ever hold would stall the run
        built = admitted(built, tenants)
    sim = Simulator(topology, jobs, cell_contention(spec, cell), information=cell.information(spec))
    report = sim.run(built)
    metrics = {key: getattr(report, key) for key in METRICS}
    if tenants is not None:
        from deepshare.tenants.fairness import fairness_report

        metrics.update(fairness_report(report.records, jobs, tenants, topology.total_gpus, sim.catalog).metrics())  # type: ignore[arg-type]
    if cell.cluster:
        metrics.update({key: getattr(report, key) for key in FABRIC_METRICS})
        metrics.update({f"cross_domain_share_{level}": share for level, share in report.cross_domain_share})
        metrics["rejected"] = report.rejected
    return metrics


def failed_run(error: str) -> dict[str, float | None]:
    """A run that failed: every metric None, and ``error``."""
    return {**{key: None for key in METRICS}, "error": error}  # type: ignore[dict-item]


def failure_text(exc: Exception) -> str:
    """How a failed run's error reads in the tables and the JSON: the exception's type and message."""
    return f"{type(exc).__name__}: {exc}"


def run_guarded(args: tuple[SuiteSpec, Cell, str], tenants: Any = SPEC_TENANTS,
                ) -> tuple[Cell, str, dict[str, float | None]]:
    """:func:`run_one` on ``(spec, cell, policy)`` and ``tenants``, with any exception kept as a failed run."""
    spec, cell, policy = args
    try:
        return cell, policy, run_one(spec, cell, policy, tenants)
    except Exception as exc:  # noqa: BLE001 - any run's failure is reported with its cell and policy
        return cell, policy, failed_run(failure_text(exc))


def run_on_worker(spec: SuiteSpec, cell: Cell, policy: str, policy_file: bytes | None,
                  tenants: Any = SPEC_TENANTS) -> tuple[Cell, str, dict[str, float | None]]:
    """:func:`run_guarded` on a Ray worker: a policy file the driver sent is first copied to this machine
    (:mod:`deepshare.experiments.policy_files`); the result keeps the driver's policy name."""
    from deepshare.experiments.policy_files import local_spec

    _single_threaded()
    try:
        runnable = policy if policy_file is None else local_spec(policy, policy_file)
    except Exception as exc:  # noqa: BLE001 - e.g. a full disk: this run fails, the suite goes on
        return cell, policy, failed_run(failure_text(exc))
    _, _, metrics = run_guarded((spec, cell, runnable), tenants)
    return cell, policy, metrics


def _single_threaded() -> None:
    # workers share the cores: one torch thread each (only if torch is already there)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def run_suite(
    spec: SuiteSpec, workers: int = 1, progress: Callable[[int, int, str], None] | None = None,
    only_cells: Sequence[Cell] | None = None, on_ray: bool = False,
) -> SuiteResult:
    """Every policy on every cell (``workers`` processes, or Ray tasks with ``on_ray``; the same
    numbers either way)."""
    grid = list(only_cells) if only_cells is not None else cells(spec)
    policies = (*spec.heuristics, *spec.learned)
    results = run_policies(spec, grid, policies, workers, progress, on_ray=on_ray)
    return SuiteResult(spec, results, {cell: cell_bound(spec, cell) for cell in grid}, pooled_ideals(spec, grid))


def run_policies(
    spec: SuiteSpec, grid: Sequence[Cell], policies: Sequence[str], workers: int = 1,
    progress: Callable[[int, int, str], None] | None = None, mp_context: BaseContext | None = None,
    on_ray: bool = False,
) -> dict[Cell, dict[str, dict[str, float | None]]]:
    """``{cell: {policy: metrics}}`` for ``policies`` on ``grid`` (``workers`` processes of
    ``mp_context``, default the platform's, or with ``on_ray`` one Ray task per run on the
    cluster this process is connected to; the same numbers for any of them). Every policy is
    built once here first, so a bad name or policy file fails before any run; the suite's tenants
    file is read here once, and its runs get what was read."""
    from deepshare.policies import make_policy

    for name in policies:
        make_policy(name)
    tenants = suite_tenants(spec)
    # the slow runs first (learned policies, link contention, large clusters) so workers end together
    tasks = sorted(
        ((spec, cell, p) for cell in grid for p in policies),
        key=lambda t: (t[2] not in spec.learned, t[1].contention != "link", -t[1].nodes),
    )
    results: dict[Cell, dict[str, dict[str, float | None]]] = {cell: {} for cell in grid}
    done = 0
    if on_ray:
        outputs: Iterable[tuple[Cell, str, dict[str, float | None]]] = _on_ray(tasks, tenants, progress)
    elif workers <= 1:
        outputs = (run_guarded(task, tenants) for task in tasks)
    else:
        outputs = _in_pool(tasks, tenants, workers, mp_context)
    try:
        for cell, policy, metrics in outputs:
            results[cell][policy] = metrics
            done += 1
            if progress is not None:
                progress(done, len(tasks), f"{policy} on {cell.label}")
    finally:
        if isinstance(outputs, Generator):
            outputs.close()  # stops the workers, or cancels the cluster's remaining tasks (Ctrl-C, an error)
    return {cell: {p: results[cell][p] for p in policies} for cell in grid}


def _in_pool(tasks: Sequence[tuple[SuiteSpec, Cell, str]], tenants: Any, workers: int,
             mp_context: BaseContext | None) -> Generator[tuple[Cell, str, dict[str, float | None]], None, None]:
    """The runs of ``tasks`` on ``workers`` local processes, as they finish
    (:func:`~deepshare.experiments.pool_runs.pool_tasks`): a run whose process kept dying is a
    failed run, and the others keep their numbers."""
    from deepshare.experiments.pool_runs import pool_tasks
    from deepshare.experiments.ray_runs import Lost

    calls = [(task, tenants) for task in tasks]
    with closing(pool_tasks(run_guarded, calls, workers, initializer=_single_threaded, mp_context=mp_context)) as outputs:
        for i, output in outputs:  # closed: the workers are stopped
            yield (*tasks[i][1:], failed_run(output.error)) if isinstance(output, Lost) else output


def _on_ray(tasks: Sequence[tuple[SuiteSpec, Cell, str]], tenants: Any,
            progress: Callable[[int, int, str], None] | None = None) -> Generator[tuple[Cell, str, dict[str, float | None]], None, None]:
    """The runs of ``tasks`` as Ray tasks (:func:`run_on_worker`), as they finish; the spec, each
    driver-only policy file and the tenants the driver read go to the object store once; a run Ray
    lost is a failed run. A cluster with no CPU yet (an autoscaler adds a node for the queued runs)
    or with every CPU busy is said to be waited for (as ``progress``'s 0th run)."""
    from deepshare.experiments.policy_files import driver_files
    from deepshare.experiments.ray_runs import Lost, Once, run_tasks

    specs = {id(spec): Once(spec) for spec, _, _ in tasks}
    files = {name: Once(data) for name, data in driver_files({p for _, _, p in tasks}).items()}
    shared_tenants = Once(tenants)
    calls = [(specs[id(spec)], cell, p, files.get(p), shared_tenants) for spec, cell, p in tasks]
    waiting = None if progress is None else (lambda message: progress(0, len(tasks), message))
    with closing(run_tasks(run_on_worker, calls, waiting=waiting)) as outputs:  # closed: the remaining tasks are cancelled
        for i, output in outputs:
            yield (*tasks[i][1:], failed_run(output.error)) if isinstance(output, Lost) else output
