"""Decision threads of a replica: decisions run off the event loop and can be abandoned.

A decision is CPU work in Python. Run on the replica's event loop, a large one would hold every
other request (health checks included) until it ends. :class:`DecisionWorkers` runs each in one
of a few threads instead, so the loop stays free to answer small requests and ``/healthz``.

Deadlines: :meth:`DecisionWorkers.run` waits at most until the request's :class:`Deadline`
(plus a short grace for the engine's own checks to fire). A decision still running then is
abandoned: the caller gets :class:`DecisionTimeout` at once, and the thread gets the same
exception raised inside it (``PyThreadState_SetAsyncExc``), which stops pure-Python work at its
next bytecode. The engine's cooperative checks normally get there first; this is the backstop
for code that asks nothing between steps (e.g. a heuristic's loop over 10,000 queued jobs).
Policies decide as functions of the view (a heuristic's queue index, the one state a policy
keeps, is per thread and rebuilt for every request's new view), so an interrupted decision
leaves nothing behind but its own view, which is discarded; the memo
caches shared across requests (the catalog's throughputs, the placement generators'
``lru_cache``) are each written in one step, so an interruption costs at most a missing entry.
A request queued behind busy threads counts its wait against its own deadline and is dropped
from the queue, never started, when that passes.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import queue
import threading
from typing import Any, Callable, Generic, TypeVar

from deepshare.core.deadline import Deadline, DecisionTimeout

T = TypeVar("T")

GRACE_S = 0.25
"""How long after the deadline the caller still waits for the engine's own check to fire."""


class _Job(Generic[T]):
    __slots__ = ("fn", "future", "loop", "started", "abandoned", "thread")

    def __init__(self, fn: Callable[[], T], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.started = False
        self.abandoned = False
        self.thread: int | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        def apply() -> None:
            if self.future.done() or self.abandoned:  # nobody awaits it: keep asyncio quiet
                return
            if error is None:
                self.future.set_result(result)
            else:
                self.future.set_exception(error if isinstance(error, Exception) else _Wrapped(error))

        try:
            self.loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the loop closed (replica shutting down): nobody is waiting
            pass


class _Wrapped(Exception):
    """Carries a BaseException (DecisionTimeout) across an asyncio future, which refuses them."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(str(inner))
        self.inner = inner


class DecisionWorkers:
    """``threads`` daemon threads running submitted decisions in arrival order."""

    def __init__(self, threads: int = 4, name: str = "deepshare-decision") -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self._queue: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: dict[int, _Job[Any]] = {}
        self.abandoned = 0
        """Decisions stopped from outside (the backstop fired); tests and metrics read it."""
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    async def run(self, fn: Callable[[], T], deadline: Deadline) -> T:
        """``fn()`` in a decision thread; :class:`DecisionTimeout` past ``deadline`` (+ grace)."""
        job: _Job[T] = _Job(fn, asyncio.get_running_loop())
        self._queue.put(job)
        remaining = deadline.remaining()
        try:
            return await asyncio.wait_for(
                asyncio.shield(job.future), None if remaining is None else remaining + GRACE_S
            )
        except asyncio.TimeoutError:
            self._abandon(job)
            raise DecisionTimeout(f"no decision within {deadline.seconds:g} s") from None
        except _Wrapped as wrapped:
            raise wrapped.inner from None
        except asyncio.CancelledError:  # the client went away: stop deciding for nobody
            self._abandon(job)
            raise

    def _abandon(self, job: _Job[Any]) -> None:
        with self._lock:
            job.abandoned = True
            thread = job.thread
            if thread is not None and self._running.get(thread) is job:
                _raise_in(thread, DecisionTimeout)
                self.abandoned += 1

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            job: _Job[Any] | None = None
            try:
                job = self._queue.get()
                self._execute(job, me)
            except DecisionTimeout:
                # An abandonment that landed after its decision ended; if it landed after this
                # thread took the next job but before starting it, that job goes back in line.
                if job is not None and not job.started:
                    self._queue.put(job)

    def _execute(self, job: _Job[Any], me: int) -> None:
        with self._lock:
            if job.abandoned:
                return  # its caller gave up while it was queued
            job.started, job.thread = True, me
            self._running[me] = job
        try:  # in a fresh copy of the context: nothing a decision installs (a deadline's check) outlives it
            result, error = contextvars.copy_context().run(job.fn), None
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            result, error = None, exc
        finally:
            with self._lock:
                self._running.pop(me, None)
        job.settle(result, error)


def _raise_in(thread: int, exc: type[BaseException]) -> None:
    """Raise ``exc`` in the thread ``thread`` at its next bytecode (CPython's async exceptions)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc))
