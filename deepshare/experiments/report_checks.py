"""What the results page checks of a report before it renders one (:mod:`deepshare.experiments.results_page`):
the JSON holds finite numbers only, each problem named by its place in the file (``cells.3.results.rl-base.avg_jct_s``).

deepshare writes its reports with ``allow_nan=False`` (:func:`deepshare.cli.output.dumps`), so a
``NaN`` or ``Infinity`` (or a number too large for a float, which Python reads as infinity) in one
means the file was corrupted or edited by hand: the page would print ``nan`` or ``inf`` as a figure.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence


class NotFinite(ValueError):
    """A report's non-finite number, and where it is."""


class _NotFinite:
    """What :func:`loads_finite` parses a non-finite number as, to find where it was."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def place(parts: Sequence[str | int]) -> str:
    """A place in a document, dotted (``cells.3.results.rl-base.avg_jct_s``; the document itself: ``the document``)."""
    return ".".join(str(p) for p in parts) or "the document"


def _first_not_finite(doc: Any) -> tuple[list[str | int], str] | None:
    """The place and literal of the first non-finite number in ``doc`` (document order), walked
    without recursion (a document nested as deep as the parser allows)."""
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:
        value, parts = stack.pop()
        if isinstance(value, _NotFinite):
            return parts, value.literal
        if isinstance(value, dict):
            stack += [(v, [*parts, k]) for k, v in reversed(list(value.items()))]
        elif isinstance(value, list):
            stack += [(v, [*parts, i]) for i, v in reversed(list(enumerate(value)))]
    return None


def loads_finite(text: str) -> Any:
    """``json.loads(text)``, but a ``NaN``, ``Infinity``, ``-Infinity`` or a number no float holds
    is a :class:`NotFinite` (a ValueError) naming its place (``cells.3.results.rl-base.avg_jct_s is NaN``)."""
    found: list[_NotFinite] = []

    def constant(literal: str) -> _NotFinite:
        found.append(_NotFinite(literal))
        return found[-1]

    def number(literal: str) -> float | _NotFinite:
        value = float(literal)
        return value if math.isfinite(value) else constant(literal)

    doc = json.loads(text, parse_constant=constant, parse_float=number)
    if found:
        where = _first_not_finite(doc)
        parts, literal = where if where is not None else ([], found[0].literal)
        raise NotFinite(f"{place(parts)} is {literal[:20]}{'...' if len(literal) > 20 else ''}, not a finite number")
    return doc
