"""A job's progress reports, checked as strictly as an HTTP body before the scheduler uses them.

A job's rank 0 writes ``report.json`` (:func:`deepshare.job.report`): the job's own process, so
anything in it is untrusted. Before a report reaches the journal, the loop's views or the learned
contention model, :func:`check_report` demands what an HTTP body would:

* a JSON object with only ``samples``, ``throughput``, ``step`` and ``time``, each absent or null;
* ``samples`` a finite number from 0 to :data:`~deepshare.core.bounds.MAX_SAMPLES`;
  ``throughput`` a finite number from 0 to :data:`~deepshare.core.bounds.MAX_THROUGHPUT`;
  ``step`` an integer from 0 to :data:`~deepshare.core.bounds.MAX_STEP`; ``time`` a finite
  number from 0 to :data:`~deepshare.core.bounds.MAX_TIMESTAMP_S` (booleans are not numbers);
* within one run, ``samples`` and ``step`` never go back (a resumed run starts from its
  checkpoint's counters, which may be behind the last run's, so each run starts afresh).

A report that fails is dropped whole: the job's counters keep their last good values and the
scheduler logs one line naming the job and the field (once per distinct problem, not per tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deepshare.core.bounds import MAX_SAMPLES, MAX_STEP, MAX_THROUGHPUT, MAX_TIMESTAMP_S, finite_in
from deepshare.core.errors import DeepShareError

FIELDS = ("samples", "throughput", "step", "time")
"""What a report may say (:func:`deepshare.job.report` writes exactly these)."""
MAX_REPORT_BYTES = 64 * 1024
"""Largest ``report.json`` the worker reads (the job API writes about a hundred bytes)."""


class BadReport(DeepShareError):
    """A report refused: ``field`` names what was wrong (``report`` for the document itself)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Progress:
    """A report that passed :func:`check_report`."""

    samples: float | None
    throughput: float | None
    step: int | None


def check_report(doc: Any, last: Progress | None = None) -> Progress:
    """``doc`` (a decoded ``report.json``) as :class:`Progress`, or :class:`BadReport` naming
    the field; ``last`` is the run's last good report, which ``samples`` and ``step`` may not undercut."""
    if not isinstance(doc, dict):
        raise BadReport("report", f"expected a JSON object, got {_kind(doc)}")
    unknown = sorted(str(k)[:64] for k in doc if k not in FIELDS)
    if unknown:
        raise BadReport(unknown[0], f"unknown field (a report has {', '.join(FIELDS)})")
    samples = _number(doc, "samples", MAX_SAMPLES, "a number of samples")
    throughput = _number(doc, "throughput", MAX_THROUGHPUT, "samples/s")
    _number(doc, "time", MAX_TIMESTAMP_S, "seconds since the epoch")
    step = doc.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP):
        raise BadReport("step", f"expected an integer from 0 to {MAX_STEP}, got {_show(step)}")
    if last is not None:
        if samples is not None and last.samples is not None and samples < last.samples:
            raise BadReport("samples", f"went back from {last.samples:g} to {samples:g} within one run")
        if step is not None and last.step is not None and step < last.step:
            raise BadReport("step", f"went back from {last.step} to {step} within one run")
    return Progress(samples, throughput, step)


def merged(last: Progress | None, new: Progress) -> Progress:
    """The run's counters after ``new``: a field ``new`` leaves out keeps its last good value."""
    if last is None:
        return new
    return Progress(
        new.samples if new.samples is not None else last.samples,
        new.throughput if new.throughput is not None else last.throughput,
        new.step if new.step is not None else last.step,
    )


def _number(doc: dict, field: str, high: float, unit: str) -> float | None:
    value = doc.get(field)
    if value is None:
        return None
    if not finite_in(value, 0.0, high):
        raise BadReport(field, f"expected a finite number from 0 to {high:g} ({unit}), got {_show(value)}")
    return float(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _show(value: Any) -> str:
    """A short, safe rendering of a bad value for a log line."""
    if isinstance(value, (dict, list, str, bool)) or value is None:
        text = repr(value) if not isinstance(value, (dict, list)) else _kind(value)
    else:
        text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."
