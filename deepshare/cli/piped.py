"""The console a command prints to when its output is not a terminal (a file, a pipe, a pager).

Text wraps at :data:`PIPED_WIDTH` columns, as it did before; a table wider than that is printed
at its own natural width instead of being fitted to it. Fitting a table to a width cuts its cells
(``bsrsf+top…`` for four different policies, in a comparison on a fabric), and a file has no edge
to fit: every name and figure is kept whole there.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

PIPED_WIDTH = 140
"""Columns that piped text wraps at, and the least width a piped table is printed at."""
_UNBOUNDED = 100_000
"""The width a table is measured at: wide enough that nothing in it is cut."""


class PipedConsole(Console):
    """A :class:`Console` whose tables are never narrower than their content (see the module doc)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(width=PIPED_WIDTH, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        natural = max((self.measure(o, options=self.options.update_width(_UNBOUNDED)).maximum
                       for o in objects if isinstance(o, Table)), default=0)
        if natural <= self.width:
            super().print(*objects, **kwargs)
            return
        width = self.width
        self.width = natural
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = width
