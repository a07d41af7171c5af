"""Cooperative interruption of long decisions, and the time a decision has left.

A caller that bounds a decision (the placement service's deadline, the live scheduler's)
installs a check for the current thread or task with :func:`checking`; work that can run long
inside a policy, beyond the questions it asks the view (the planner's rollouts on copies of the
cluster, which ask their own contention model and never the view's predictor), calls
:func:`checkpoint` between its units of work. The check raises to stop the decision
(:class:`~deepshare.core.deadline.DecisionTimeout`, a ``BaseException`` that no policy swallows);
with no check installed, :func:`checkpoint` does nothing.

The caller may also say how long the decision has left (:func:`time_left`): a policy whose work
can stop early with a worse but valid answer (the planner, on the futures done so far) reads it
and answers in time instead of being stopped. A context variable, so concurrent decisions in
other threads or tasks keep their own checks.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, NamedTuple


class _Bound(NamedTuple):
    check: Callable[[], None] | None
    left: Callable[[], float | None] | None


_BOUND: ContextVar[_Bound | None] = ContextVar("deepshare_decision_bound", default=None)


def checkpoint() -> None:
    """Run the installed check (it raises to stop the decision); nothing when none is installed."""
    bound = _BOUND.get()
    if bound is not None and bound.check is not None:
        bound.check()


def time_left() -> float | None:
    """Seconds the current decision has left, as its caller said; None when unbounded."""
    bound = _BOUND.get()
    if bound is None or bound.left is None:
        return None
    return bound.left()


@contextmanager
def checking(check: Callable[[], None] | None, left: Callable[[], float | None] | None = None) -> Iterator[None]:
    """Install ``check`` for :func:`checkpoint` calls made inside the block (None: no check), and
    ``left`` (seconds the decision has left, None: unbounded) for :func:`time_left`."""
    token = _BOUND.set(_Bound(check, left))
    try:
        yield
    finally:
        _BOUND.reset(token)
