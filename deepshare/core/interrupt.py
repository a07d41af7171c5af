"""Cooperative interruption of long decisions.

A caller that bounds a decision (the placement service's deadline) installs a check for the
current thread or task with :func:`checking`; work that can run long inside a policy, beyond
the questions it asks the view (the planner's rollouts on copies of the cluster, which ask
their own contention model and never the view's predictor), calls :func:`checkpoint` between
its units of work. The check raises to stop the decision (the service's
:class:`~deepshare.serving.deadline.DecisionTimeout`, a ``BaseException`` that no policy
swallows); with no check installed, :func:`checkpoint` does nothing. A context variable, so
concurrent decisions in other threads or tasks keep their own checks.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

_CHECK: ContextVar[Callable[[], None] | None] = ContextVar("deepshare_decision_check", default=None)


def checkpoint() -> None:
    """Run the installed check (it raises to stop the decision); nothing when none is installed."""
    check = _CHECK.get()
    if check is not None:
        check()


@contextmanager
def checking(check: Callable[[], None] | None) -> Iterator[None]:
    """Install ``check`` for :func:`checkpoint` calls made inside the block (None: no check)."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)
