"""Process pools whose workers stop with their caller.

A ``ProcessPoolExecutor`` left by an exception waits for its workers' current tasks, and one whose
caller is killed leaves them behind, blocked forever on the pool's queue (orphans holding the
terminal's pipes). Ctrl-C reaches the workers with the terminal's process group; a SIGTERM sent to
the caller alone (which the CLI turns into :class:`~deepshare.cli.Terminated`) does not, so an
interrupted caller terminates them itself.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator


JOIN_S = 5.0
"""How long a stopped pool waits for each terminated worker to exit before killing it."""


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate ``pool``'s worker processes now (their current tasks are abandoned) and shut the
    pool down without waiting for them.

    A worker terminated while it was sending a result leaves half a message in the pool's result
    pipe, and the pool's manager thread waits for the rest for ever: a waiting shutdown (or the
    interpreter's exit, which joins that thread) would hang. The caller's own end of that pipe
    is closed once the workers are gone, so the thread reads the end of the pipe instead and
    stops."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)  # shutdown forgets the queue
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):  # already gone, or closed
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.join(JOIN_S)
            if process.is_alive():
                process.kill()
                process.join(JOIN_S)
        except (OSError, ValueError, AssertionError):
            pass
    if writer is not None:
        try:
            writer.close()
        except OSError:
            pass


@contextmanager
def worker_pool(max_workers: int, **options: Any) -> Iterator[ProcessPoolExecutor]:
    """A ``ProcessPoolExecutor`` that is shut down on leaving, its workers terminated first when
    the block ends by an exception (an interrupt, an error)."""
    pool = ProcessPoolExecutor(max_workers=max_workers, **options)
    try:
        yield pool
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown(cancel_futures=True)
