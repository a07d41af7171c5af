"""A process-pool worker forked from a process with a Python SIGTERM handler (the CLI's, which
raises ``Terminated``; Ray's, which calls ``sys.exit``) ends on SIGTERM instead of running that
handler. Terminated just after the fork, such a child raised the handler's exception in its copy
of the parent's stack and unwound the caller's code as if it were the caller (CI saw it as two
failures of tests/experiments/test_suite_pool.py, reported by a stray copy of a pytest worker)."""

from __future__ import annotations

import multiprocessing
import signal
import sys
import time
from typing import Iterator

import pytest

import deepshare.core.workers  # noqa: F401 - registers the after-fork reset

linux_fork = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")


@pytest.fixture
def fork() -> Iterator[multiprocessing.context.BaseContext]:
    """The fork start method, in a process whose SIGTERM handler is Python's (as Ray's is:
    ``sys.exit(15)``), put back as it was afterwards."""
    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))
    try:
        yield multiprocessing.get_context("fork")
    finally:
        signal.signal(signal.SIGTERM, old)


def _report_handler(queue) -> None:  # type: ignore[no-untyped-def]
    queue.put(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)


@linux_fork
def test_a_forked_child_gets_the_default_sigterm_action(fork):
    queue = fork.Queue()
    child = fork.Process(target=_report_handler, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert queue.get(timeout=10) is True
    assert callable(signal.getsignal(signal.SIGTERM))  # the parent's own handler stays


def _started_then_sleep(event) -> None:  # type: ignore[no-untyped-def]
    event.set()
    time.sleep(60)


@linux_fork
def test_a_terminated_forked_child_ends_with_sigterm_not_the_parents_handler(fork):
    started = fork.Event()
    child = fork.Process(target=_started_then_sleep, args=(started,))
    child.start()
    assert started.wait(timeout=30)
    child.terminate()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGTERM  # killed by the signal; the handler would have exited 15


@linux_fork
def test_a_child_terminated_at_once_after_the_fork_still_ends_by_sigterm(fork):
    """Sent before the child's reset, SIGTERM is held pending (blocked across the fork), not run
    by the parent's handler in the child's copy of the parent's stack, nor dropped."""
    codes = []
    for _ in range(10):
        child = fork.Process(target=time.sleep, args=(30,))
        child.start()
        child.terminate()
        child.join(timeout=60)
        codes.append(child.exitcode)
    assert codes == [-signal.SIGTERM] * 10


PARENT = """
import ctypes, functools, os, signal, sys, time
# a C-level before-fork hook registered before deepshare's, so run after it (before-hooks run in
# reverse order): SIGTERM reaches the parent while deepshare holds it blocked around the fork
os.register_at_fork(before=functools.partial(getattr(ctypes.CDLL(None), "raise"), int(signal.SIGTERM)))
import deepshare.core.workers
class Terminated(Exception):
    pass
def handler(*_):
    raise Terminated()
signal.signal(signal.SIGTERM, handler)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(5)
    print("lost")
except Terminated:
    print("reached")
"""


@linux_fork
def test_a_sigterm_the_parent_gets_during_a_fork_still_reaches_its_handler():
    """Second read: unblocked inside the parent's fork hook, the held SIGTERM ran its handler
    there, whose exception CPython drops: the command went on. It is sent again after the fork."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.stdout.strip() == "reached", done.stderr
