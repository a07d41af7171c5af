"""A process-pool worker forked from a process with a Python SIGTERM handler (the CLI's, which
raises ``Terminated``; Ray's, which calls ``sys.exit``) ends on SIGTERM instead of running that
handler. Terminated just after the fork, such a child raised the handler's exception in its copy
of the parent's stack and unwound the caller's code as if it were the caller (CI saw it as two
failures of tests/experiments/test_suite_pool.py, reported by a stray copy of a pytest worker)."""

from __future__ import annotations

import multiprocessing
import signal
import sys

import pytest

import deepshare.core.workers  # noqa: F401 - registers the after-fork reset


def _report_handler(queue) -> None:  # type: ignore[no-untyped-def]
    queue.put(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")
def test_a_forked_child_gets_the_default_sigterm_action():
    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))
    try:
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_report_handler, args=(queue,))
        child.start()
        child.join(timeout=60)
        assert queue.get(timeout=10) is True
        assert callable(signal.getsignal(signal.SIGTERM))  # the parent's own handler stays
    finally:
        signal.signal(signal.SIGTERM, old)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")
def test_a_terminated_forked_child_ends_with_sigterm_not_the_parents_handler():
    import time

    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))
    try:
        context = multiprocessing.get_context("fork")
        child = context.Process(target=time.sleep, args=(60,))
        child.start()
        child.terminate()
        child.join(timeout=60)
        assert child.exitcode == -signal.SIGTERM  # killed by the signal; the handler would have exited 15
    finally:
        signal.signal(signal.SIGTERM, old)
