"""Independent runs in a local pool of processes, kept when a worker process dies.

A worker that dies (``os._exit``, a segfault, the OOM killer) breaks a ``ProcessPoolExecutor``:
every run not yet collected then fails with ``BrokenProcessPool``, the innocent with the culprit,
and a caller that let that through lost every finished run. :func:`pool_tasks` keeps each result
it collected, then reruns the unfinished runs one at a time in a fresh pool of one worker, so that
a death there is that run's own; a run whose worker dies :data:`~deepshare.experiments.ray_runs.MAX_RETRIES`
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

from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, Sequence

from deepshare.core.workers import stop_workers
from deepshare.experiments.ray_runs import MAX_RETRIES, Lost


def pool_tasks(fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], workers: int,
               max_retries: int = MAX_RETRIES, **options: Any) -> Iterator[tuple[int, Any]]:
    """``(i, fn(*calls[i]))`` for every call, as the runs finish, on ``workers`` processes
    (``options`` go to ``ProcessPoolExecutor``); a run whose process kept dying gives a :class:`Lost`."""
    pool = ProcessPoolExecutor(max_workers=workers, **options)
    alone: ProcessPoolExecutor | None = None  # the pool of one worker that reruns unfinished runs
    try:
        futures = {pool.submit(fn, *call): i for i, call in enumerate(calls)}
        unfinished: list[int] = []
        for future in as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool:  # this run's worker died, or another's broke the pool
                unfinished.append(futures[future])
                continue
            yield futures[future], result
        for i in sorted(unfinished):
            for _ in range(max_retries):
                if alone is None:  # the first pool, or one whose worker just died
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

