"""A decision's deadline: what bounds the work one decision may cause.

The placement engine checks a :class:`Deadline` between the steps of a decision (view built,
each learned policy step, each contention prediction a heuristic asks for); past it,
:meth:`Deadline.check` raises :class:`DecisionTimeout` and the work unwinds. The service answers
that with 503; the live scheduler's tick applies nothing and says so. Both also tell the policy
how long it has (:func:`deepshare.core.interrupt.checking`), so a policy that can answer early
(the planner) does, rather than time out.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Callable, ContextManager

from deepshare.core.interrupt import checking


class DecisionTimeout(BaseException):
    """The decision ran past its deadline.

    A ``BaseException``, like ``KeyboardInterrupt``: it must unwind through policy code that
    catches ``Exception`` (a policy is not allowed to swallow the end of its time).
    """


class Deadline:
    """``seconds`` from now on a monotonic clock (``None``: never)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.at = None if seconds is None else clock() + seconds

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` without a deadline."""
        return None if self.at is None else max(0.0, self.at - self._clock())

    def expired(self) -> bool:
        return self.at is not None and self._clock() >= self.at

    def check(self) -> None:
        """Raise :class:`DecisionTimeout` once the deadline has passed."""
        if self.at is not None and self._clock() >= self.at:
            raise DecisionTimeout(f"no decision within {self.seconds:g} s")


NO_DEADLINE = Deadline(None)


def bounded(deadline: Deadline) -> ContextManager[None]:
    """Install ``deadline`` for the policy code run inside the block: its check for
    :func:`~deepshare.core.interrupt.checkpoint`, its time left for
    :func:`~deepshare.core.interrupt.time_left` (nothing for a deadline that is none)."""
    if deadline.at is None:
        return nullcontext()
    return checking(deadline.check, deadline.remaining)
