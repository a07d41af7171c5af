"""Independent runs as Ray tasks on the cluster this process is connected to.

The suite, ``compare`` and ``evaluate`` with ``--address`` hand their runs here instead of to a
local pool. Each run is one task of one CPU, submitted in the caller's order (the slow ones
first: Ray starts queued tasks of one kind in the order they came), and :func:`run_tasks` yields
each result as it arrives, with its index, so the caller keys it as the local path does and the
order of arrival never shows in the results.

Faults. A task whose worker or node dies is run again elsewhere by Ray, at most ``max_retries``
times (:data:`MAX_RETRIES`); one lost more often than that comes back as a :class:`Lost` in its
place, never dropped. An exception raised by the run itself is not retried (the same inputs fail
the same way) and is raised here as the run raised it; the suite catches its runs' errors in the
task, so they come back as failed results. Ctrl-C (a ``KeyboardInterrupt`` anywhere in the loop,
the caller's progress callback included) or closing the generator cancels every task not yet
collected, then lets the interrupt through.

A cluster with no CPU yet (an autoscaling one whose head has ``--num-cpus 0`` and no worker node
up, as the project's cluster YAMLs start) gets the runs queued, and their CPU demand makes the
autoscaler start a node; a cluster whose CPUs are all busy gets them queued too. Either way the
caller's ``waiting`` callback is told first, so the wait is never silent.

Values wrapped in :class:`Once` (a suite spec, a scenario's jobs, a policy file's bytes) are put
in the object store once however many runs take them; each task receives the value itself.
Ray is imported when tasks are run, so the CLI can read :data:`MAX_RETRIES` for its help.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence


MAX_RETRIES = 3
"""How often Ray reruns a task whose worker or node died before the run counts as lost."""
WAIT_S = 0.5
"""Longest wait for a result before the loop looks again (keeps Ctrl-C prompt)."""
CANCEL_GRACE_S = 5.0
"""How long cancelled runs get to stop before they are cancelled again, with force."""


@dataclass(frozen=True, eq=False)
class Once:
    """An argument shared by many runs: stored once, passed to each task as the value itself."""

    value: Any


@dataclass(frozen=True)
class Lost:
    """A run Ray gave up on after ``max_retries`` reruns (its node kept dying)."""

    error: str


NO_CPU_YET = ("no CPU in the Ray cluster yet: waiting for a node (an autoscaler starts one for the queued runs); "
              "Ctrl-C stops")
BUSY = "waiting for a free CPU of the Ray cluster (every one is busy); the runs start as CPUs free up"


def free_cpus() -> float:
    """How many CPUs of the connected Ray cluster are free now (0 on a cluster with none yet)."""
    import ray

    return float(ray.available_resources().get("CPU", 0))


def run_tasks(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], max_retries: int = MAX_RETRIES,
              waiting: Callable[[str], None] | None = None) -> Iterator[tuple[int, Any]]:
    """``(i, fn(*calls[i]))`` for every call, as the tasks finish; a lost run's result is a :class:`Lost`.
    A cluster with no CPU yet (an autoscaler adds a node for the queued runs) or with every CPU
    busy gets the runs queued, and ``waiting`` is told so first."""
    import ray

    if waiting is not None and free_cpus() < 1:
        waiting(NO_CPU_YET if ray.cluster_resources().get("CPU", 0) < 1 else BUSY)
    remote = ray.remote(fn).options(num_cpus=1, max_retries=max_retries, retry_exceptions=False)
    stored: dict[int, Any] = {}

    def arg(value: Any) -> Any:
        if isinstance(value, Once):
            if id(value) not in stored:
                stored[id(value)] = (value, ray.put(value.value))  # the Once is kept alive with its ref
            return stored[id(value)][1]
        return value

    pending: list[Any] = []
    try:
        for call in calls:  # inside the try: Ctrl-C while submitting cancels what went already
            pending.append(remote.remote(*(arg(v) for v in call)))
        index = {ref: i for i, ref in enumerate(pending)}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_S)
            for ref in ready:
                yield index[ref], _result(ref, max_retries)
    except BaseException:  # Ctrl-C, a closed generator, a run's own error: nothing keeps running
        _cancel(pending)
        raise


def _cancel(refs: list[Any]) -> None:
    """Cancel every run; those still going after :data:`CANCEL_GRACE_S` are cancelled again with
    force (their worker is killed). Ray's cancel is best effort: a task pushed to a worker that has
    not started it yet can miss it (ray-project/ray#24359, #46157) and would run to its end.
    Errors are swallowed (e.g. Ray gone meanwhile): the error that stopped the loop is the one to see."""
    import ray

    for ref in refs:
        with suppress(Exception):
            ray.cancel(ref)
    if not refs:
        return
    with suppress(Exception):
        _, running = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        for ref in running:
            with suppress(Exception):
                ray.cancel(ref, force=True)


def _result(ref: Any, max_retries: int) -> Any:
    """The task's value; its own exception re-raised as it was raised; a :class:`Lost` for the rest."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        return ray.get(ref)
    except RayTaskError as exc:
        cause = exc.cause
        raise (cause if isinstance(cause, Exception) else exc) from None
    except RayError as exc:  # the worker or node died more often than Ray reruns it
        first = (str(exc).strip().splitlines() or [""])[0]
        return Lost(f"lost after {max_retries} retries: {type(exc).__name__}: {first}".rstrip(": "))
