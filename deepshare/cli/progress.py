"""Progress of long CLI work: simulations (:class:`ProgressBar`) and ``deepshare calibrate``'s fits.

A simulation's bar shows only on a terminal and for runs of at least :data:`PROGRESS_MIN_JOBS`
jobs. For the fits, on a terminal a rich bar counts the seeded starts of every fit (full fit, then one per
cross-validation fold) with the elapsed time; on a pipe or a log file a plain line says when
each fit is done, so a CI log shows the run advancing instead of minutes of silence.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from deepshare.cli.args import print_line

if TYPE_CHECKING:  # pragma: no cover - annotations only: the fit imports SciPy
    from rich.console import Console

    from deepshare.core.contention.link.calibrate import FitProgress

PROGRESS_MIN_JOBS = 500


class CalibrationProgress:
    """A context manager whose :meth:`step` is ``calibrate(step=...)``'s callback."""

    def __init__(self, console: Any) -> None:
        self._console = console
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        if console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("calibrating: {task.description}", markup=False), BarColumn(),
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


class ProgressBar:
    """A rich progress bar on stderr, shown only on a terminal and for long runs."""

    def __init__(self, console: Console, total: int, enabled: bool) -> None:
        self._enabled = enabled and console.is_terminal and total >= PROGRESS_MIN_JOBS
        self._progress = None
        self._task = None
        if self._enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}", markup=False), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                TimeElapsedColumn(), console=console, transient=True,
            )

    def __enter__(self) -> "ProgressBar":
        if self._progress is not None:
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def callback(self, description: str) -> Callable[[int, int], None] | None:
        if self._progress is None:
            return None
        task = self._progress.add_task(description, total=None)
        progress = self._progress

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return update
