"""What the results page checks of a report before it renders one (:mod:`deepshare.experiments.results_page`):
the JSON holds finite numbers only, and a suite report's cells hold what the page shows (known
information models, positive JCTs, the same policies in every cell), each problem named by its
place in the file (``cells.3.results.rl-base.avg_jct_s``) and its cell.

deepshare writes its reports with ``allow_nan=False`` (:func:`deepshare.cli.output.dumps`), so a
``NaN`` or ``Infinity`` (or a number too large for a float: ``1e400``, which Python reads as
infinity, or an integer of 400 digits) in one means the file was corrupted or edited by hand: the
page would print ``nan`` or ``inf`` as a figure.
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
    (``1e400``, or an integer of 400 digits) is a :class:`NotFinite` (a ValueError) naming its place (``cells.3.results.rl-base.avg_jct_s is NaN``)."""
    found: list[_NotFinite] = []

    def constant(literal: str) -> _NotFinite:
        found.append(_NotFinite(literal))
        return found[-1]

    def number(literal: str) -> float | _NotFinite:
        value = float(literal)
        return value if math.isfinite(value) else constant(literal)

    def integer(literal: str) -> int | _NotFinite:  # 400 digits: the page's float() of it overflowed
        return int(literal) if math.isfinite(float(literal)) else constant(literal)

    doc = json.loads(text, parse_constant=constant, parse_float=number, parse_int=integer)
    if found:
        where = _first_not_finite(doc)
        parts, literal = where if where is not None else ([], found[0].literal)
        raise NotFinite(f"{place(parts)} is {literal[:20]}{'...' if len(literal) > 20 else ''}, not a finite number")
    return doc


class BadReport(ValueError):
    """A suite report's field the page cannot show, and where it is."""


CELL_JCTS = ("best_avg_jct_s", "jct_bound_s", "pooled_ideal_s")
"""A cell's times the page divides by or takes the logarithm of: each a positive number or null."""
RUN_JCTS = ("avg_jct_s", "p99_jct_s")
"""A run's times (``cells.N.results.POLICY``): each a positive number or null (a failed run)."""
CELL_KEYS = ("load", "mix", "nodes", "gpus_per_node", "contention", "seed")
"""A cell's scenario: a field one cell has, every cell has."""


def _cell_label(cell: dict[str, Any]) -> str:
    """`` (the cell load 1 heavy 4x8 profiled seed 0 exact)`` when the cell's key is whole, else nothing."""
    from deepshare.experiments.suite_cells import Cell

    try:
        return f" (the cell {Cell.from_key(cell).label})"
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return ""


def _positive(value: Any) -> bool:
    """Whether ``value`` is a positive finite number (not a boolean) or None."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return value > 0 and math.isfinite(float(value))
    except OverflowError:  # an integer of 400 digits
        return False


def check_suite_report(doc: dict[str, Any]) -> None:
    """A BadReport naming the first field of a suite report (``deepshare evaluate --suite --json``)
    the page cannot show as it is, and its cell: cells that are not a list of mappings, a cell
    without ``results`` or without a policy the other cells ran, an information model no suite
    runs (``durations``, ``contention_knowledge``), a JCT that is not a positive number or null,
    a ``best_heuristic`` that did not run in the cell, or a scenario field (``load`` ...) that
    other cells have and one lacks."""
    from deepshare.core.errors import shown
    from deepshare.core.information import CONTENTION_KNOWLEDGE, DURATIONS

    cells = doc["cells"]
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise BadReport(f"cells: expected a list of cells (mappings), got {shown(cells)}")
    keys = [k for k in CELL_KEYS if any(k in c for c in cells)]
    policies = list(dict.fromkeys(p for c in cells if isinstance(c.get("results"), dict) for p in c["results"]))
    for i, cell in enumerate(cells):

        def bad(at: str, message: str) -> BadReport:
            return BadReport(f"cells.{i}{at}: {message}{_cell_label(cell)}")

        missing = [k for k in keys if k not in cell]
        if missing:
            raise bad("", f"no {missing[0]!r} (other cells have one)")
        for field, known in (("durations", DURATIONS), ("contention_knowledge", CONTENTION_KNOWLEDGE)):
            if field in cell and (not isinstance(cell[field], str) or cell[field] not in known):
                raise bad(f".{field}", f"{shown(cell[field])} is none of {', '.join(known)}")
        results = cell.get("results")
        if not isinstance(results, dict):
            raise bad(".results", f"expected a mapping of each policy to its run, got {shown(results)}")
        for policy in policies:
            run = results.get(policy)
            if run is None:
                raise bad(".results", f"no run of {policy!r} (other cells have one)")
            if not isinstance(run, dict):
                raise bad(f".results.{policy}", f"expected a mapping of the run's figures, got {shown(run)}")
            for field in RUN_JCTS:
                if not _positive(run.get(field)):
                    raise bad(f".results.{policy}.{field}", f"{shown(run[field])} is not a positive number or null")
        for field in CELL_JCTS:
            if not _positive(cell.get(field)):
                raise bad(f".{field}", f"{shown(cell[field])} is not a positive number or null")
        best = cell.get("best_heuristic")
        if best is not None and (not isinstance(best, str) or best not in results):
            raise bad(".best_heuristic", f"{shown(best)} did not run in this cell")
