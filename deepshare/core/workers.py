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


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate ``pool``'s worker processes now (their current tasks are abandoned)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.terminate()
        except (OSError, ValueError):  # already gone, or closed
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
    finally:
        pool.shutdown(cancel_futures=True)
