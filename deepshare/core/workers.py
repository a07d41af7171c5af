"""Process pools whose workers stop with their caller.

A ``ProcessPoolExecutor`` left by an exception waits for its workers' current tasks, and one whose
caller is killed leaves them behind, blocked forever on the pool's queue (orphans holding the
terminal's pipes). Ctrl-C reaches the workers with the terminal's process group; a SIGTERM sent to
the caller alone (which the CLI turns into :class:`~deepshare.cli.Terminated`) does not, so an
interrupted caller terminates them itself.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator


JOIN_S = 5.0
"""How long a stopped pool waits for its terminated workers (all together) before killing them,
and then for its manager thread."""


_held = threading.local()
"""Whether this thread blocked SIGTERM around the fork it is making (:func:`_hold_sigterm`)."""
REDELIVER_S = 0.05
"""How long after a fork a SIGTERM the parent received during it is sent again (:func:`_release_sigterm`)."""


def _hold_sigterm() -> None:
    """Before a fork: where a Python handler takes SIGTERM, block it in the forking thread, so
    that one sent to the child before :func:`_default_sigterm_in_child` has run stays pending in
    the kernel (CPython drops a signal its handler caught before the child's fork hooks, and a
    handler's exception raised inside one), and ends the child once the reset unblocks it."""
    _held.on = False
    if callable(signal.getsignal(signal.SIGTERM)):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _held.on = True


def _release_sigterm() -> None:
    """After a fork, in the parent: unblock SIGTERM. One that came meanwhile is taken while still
    blocked and sent again a moment later: unblocked here, its handler would run inside this fork
    hook, whose exception (``Terminated``) CPython drops, and the command would go on."""
    if not getattr(_held, "on", False):
        return
    _held.on = False
    came = signal.SIGTERM in signal.sigpending() and signal.sigtimedwait({signal.SIGTERM}, 0) is not None
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if came:
        resend = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signal.SIGTERM))
        resend.daemon = True
        resend.start()


def _default_sigterm_in_child() -> None:
    """A forked child's SIGTERM does what SIGTERM does (ends the process), not what its parent's
    Python handler does: the CLI's handler raises :class:`~deepshare.cli.Terminated` and Ray's
    ``sys.exit``. A pool worker terminated just after the fork (a pool breaking while runs were
    handed over: the pool terminates its other workers, or :func:`stop_workers` does) raised that
    exception in the child's copy of its parent's stack, before multiprocessing's own code took
    over, and the child then unwound the caller's code as if it were the caller: its ``finally``
    blocks ran twice, once in a stray process (seen as two test failures reported by such a
    child under pytest-xdist). A SIGTERM held pending since the fork (:func:`_hold_sigterm`)
    ends the child when it is unblocked here; another signal's handler raising meanwhile (a
    Ctrl-C reaching the whole process group) is retried past, and SIGTERM is unblocked whatever
    happens."""
    try:
        for _ in range(3):
            try:
                if callable(signal.getsignal(signal.SIGTERM)):
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                break
            except (ValueError, OSError):  # no such signal here
                break
            except BaseException:  # noqa: BLE001 - a pending handler's exception, which the fork hook would drop
                continue
    finally:
        if getattr(_held, "on", False):
            _held.on = False
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if hasattr(os, "register_at_fork") and hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigtimedwait"):
    os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm, after_in_child=_default_sigterm_in_child)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate ``pool``'s worker processes now (their current tasks are abandoned, the pending
    ones fail with ``BrokenProcessPool``) and shut the pool down without waiting for them.

    A worker terminated while it was sending a result leaves half a message in the pool's result
    pipe, and the pool's manager thread waits for the rest for ever: a waiting shutdown (or the
    interpreter's exit, which joins that thread) would hang. The caller's own end of that pipe
    is closed once the workers are gone, so the thread reads the end of the pipe instead, marks
    the pool broken and stops; it is waited for, so that its clean-up ends before the caller
    goes on (cancelling futures it is still failing)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)  # shutdown forgets the queue
    manager = getattr(pool, "_executor_manager_thread", None)
    for process in processes:
        try:
            process.terminate()
        except (OSError, ValueError):  # already gone, or closed
            pass
    # not cancel_futures: the manager thread fails every pending future itself once it sees the
    # workers gone, and cancelling them meanwhile made it raise InvalidStateError (Python 3.11)
    pool.shutdown(wait=False)
    deadline = time.monotonic() + JOIN_S
    for process in processes:  # one deadline for all: a worker in a long C call ignores SIGTERM until it returns
        _join(process, deadline - time.monotonic())
    for process in processes:
        try:
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
    if isinstance(manager, threading.Thread) and manager is not threading.current_thread():
        manager.join(JOIN_S)


def _join(process: Any, seconds: float) -> None:
    try:
        process.join(max(0.0, seconds))
    except (OSError, ValueError, AssertionError):  # closed, or not this process's child
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
