"""A decision's deadline: what bounds the work one placement request may cause.

The engine checks a :class:`Deadline` between the steps of a decision (view built, each learned
policy step, each contention prediction a heuristic asks for); past it, :meth:`Deadline.check`
raises :class:`DecisionTimeout` and the work unwinds. The service answers that with 503.
"""

from __future__ import annotations

import time
from typing import Callable


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
