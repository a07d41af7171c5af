"""Progress of long CLI work that is not a simulation: ``deepshare calibrate``'s fits.

On a terminal a rich bar counts the seeded starts of every fit (full fit, then one per
cross-validation fold) with the elapsed time; on a pipe or a log file a plain line says when
each fit is done, so a CI log shows the run advancing instead of minutes of silence.
"""

from __future__ import annotations

import time
from typing import Any

from deepshare.cli.args import print_line
from deepshare.core.contention.link.calibrate import FitProgress


class CalibrationProgress:
    """A context manager whose :meth:`step` is ``calibrate(step=...)``'s callback."""

    def __init__(self, console: Any) -> None:
        self._console = console
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        if console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("calibrating: {task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total} starts"), TimeElapsedColumn(),
                                 console=console, transient=True)

    def __enter__(self) -> "CalibrationProgress":
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def intro(self, message: str) -> None:
        """The calibration's opening line (what is fitted, how many folds and starts)."""
        print_line(self._console, message)

    def step(self, p: FitProgress) -> None:
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task(p.fit, total=p.total)
            self._bar.update(self._task, completed=p.done, description=p.fit)
        elif p.fit_complete:
            print_line(self._console, f"{p.fit} done ({p.done}/{p.total} starts, {time.monotonic() - self._started:.0f} s)")
