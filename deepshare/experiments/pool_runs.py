"""Independent runs in a local pool of processes, kept when a worker process dies.

A worker that dies (``os._exit``, a segfault, the OOM killer) breaks a ``ProcessPoolExecutor``:
every run not yet collected then fails with ``BrokenProcessPool`` (and so does submitting one),
the innocent with the culprit, and a caller that let that through lost every finished run.
:func:`pool_tasks` keeps each result it collected and reruns the unfinished runs (those not yet
submitted included) together in a fresh pool of the same size: a death that was transient, or
the one run that dies, costs that run's worker and no parallelism. Only when that pool breaks
too are the runs it left unfinished rerun one at a time in a pool of one worker, so that a death
there is that run's own; a run whose worker dies :data:`~deepshare.experiments.ray_runs.MAX_RETRIES`
times alone comes back as a :class:`~deepshare.experiments.ray_runs.Lost` in its place, as the Ray
path reports a run whose node kept dying. The innocent runs thus get the numbers they get with any
other worker count.

An exception raised by a run itself is raised here as it was raised. An interrupt (Ctrl-C, a
closed generator, the caller's own error) terminates the workers with
:func:`~deepshare.core.workers.stop_workers` and lets it through; the futures are left to it, not
cancelled (cancelling futures the pool's thread was failing made it die on ``InvalidStateError``,
Python 3.11).
"""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Generator, Iterable, Iterator, Sequence

from deepshare.core.workers import stop_workers
from deepshare.experiments.ray_runs import MAX_RETRIES, Lost


def pool_tasks(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int,
               max_retries: int = MAX_RETRIES, **options: Any) -> Iterator[tuple[int, Any]]:
    """``(i, fn(*calls[i]))`` for every call, as the runs finish, on ``workers`` processes
    (``options`` go to ``ProcessPoolExecutor``); a run whose process kept dying gives a :class:`Lost`."""
    pool = ProcessPoolExecutor(max_workers=workers, **options)
    try:
        unfinished = yield from _round(pool, fn, enumerate(calls))
        if unfinished:  # a worker died: the rest run again together, in a fresh pool of the same size
            stop_workers(pool)
            pool = ProcessPoolExecutor(max_workers=workers, **options)
            unfinished = yield from _round(pool, fn, ((i, calls[i]) for i in unfinished))
        alone: ProcessPoolExecutor | None = None  # it broke again: what it left runs one at a time
        for i in unfinished:
            for _ in range(max_retries):
                if alone is None:  # the pool that broke, or a one-worker pool whose worker just died
                    stop_workers(pool)
                    pool = alone = ProcessPoolExecutor(max_workers=1, **options)
                try:
                    result = alone.submit(fn, *calls[i]).result()
                except BrokenProcessPool:
                    alone = None
                    continue
                yield i, result
                break
            else:
                yield i, Lost(f"worker process died: its process ended abruptly on each of {max_retries} "
                              "reruns alone (killed, e.g. for memory, or it exited)")
    except BaseException:
        stop_workers(pool)  # an interrupted run does not wait for (or leave behind) its workers
        raise
    pool.shutdown()


def _round(pool: ProcessPoolExecutor, fn: Callable[..., Any], calls: Iterable[tuple[int, tuple[Any, ...]]],
           ) -> Generator[tuple[int, Any], None, list[int]]:
    """Yield ``(i, fn(*call))`` for each ``(i, call)`` run to its end in ``pool``; return the
    indices of the runs a broken pool left unfinished (in order), those it refused to take included."""
    futures: dict[Future[Any], int] = {}
    unfinished: list[int] = []
    todo = iter(calls)
    for i, call in todo:
        try:
            futures[pool.submit(fn, *call)] = i
        except BrokenProcessPool:  # a worker died while the runs were being handed over
            unfinished += [i, *(j for j, _ in todo)]
    for future in as_completed(futures):
        try:
            result = future.result()
        except BrokenProcessPool:  # this run's worker died, or another's broke the pool
            unfinished.append(futures[future])
            continue
        yield futures[future], result
    return sorted(unfinished)
