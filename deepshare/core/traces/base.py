"""The :class:`Trace` value and the parsing helpers every loader shares.

Every problem in an input file raises :class:`DeepShareError` whose message starts with a
*location*: the file and, for CSV, the 1-based physical line (the header is line 1); for JSON,
the job (id and/or list index). Field problems then name the field and say what was expected,
e.g. ``trace.csv line 7: field 'num_gpu': expected a positive integer up to 65,536, got 'abc'``.
The field helpers hold numbers to the domain of :mod:`deepshare.core.bounds` (GPU counts,
run times, clock readings, samples), and :class:`~deepshare.core.types.JobSpec` checks it again
for what a loader computes (a run time from two dates), its complaint located by
:func:`make_job`. Loaders never let ``KeyError``, ``ValueError``, ``OverflowError``,
``UnicodeDecodeError`` or ``JSONDecodeError`` escape: a user with a bad file should learn where
it is bad, not read a traceback.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_SAMPLES, MAX_TIMESTAMP_S, MIN_SAMPLES, MIN_WORK_S
from deepshare.core.documents import load_json
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.files import TRACE_BYTES, numbered_rows, read_input_bytes
from deepshare.core.traces.mixes import ModelMix, assign, mix_preset
from deepshare.core.types import JobSpec
from deepshare.core.written import NUMBER


@dataclass(frozen=True)
class Trace:
    """Jobs to simulate, sorted by (submit_time, order in the file), plus what was left out.

    ``skipped`` holds ``(job id, reason)`` for jobs in the file that cannot be simulated (a CPU
    job, a Philly job that never ran): they are reported, never silently dropped.
    """

    jobs: tuple[JobSpec, ...]
    format: str
    source: str
    skipped: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        object.__setattr__(self, "skipped", tuple(tuple(s) for s in self.skipped))

    def __len__(self) -> int:
        return len(self.jobs)


# -- building the result -----------------------------------------------------------------------
def finish(jobs: Iterable[JobSpec], fmt: str, source: str, skipped: Iterable[tuple[str, str]] = ()) -> Trace:
    """Sort ``jobs`` stably by submit time (ties keep file order) and wrap them in a Trace."""
    ordered = sorted(jobs, key=lambda j: j.submit_time)  # sorted() is stable
    return Trace(tuple(ordered), fmt, source, tuple(skipped))


@dataclass(frozen=True)
class Run:
    """A job of a log that names no model (Helios, Philly, PAI, Slurm), before its model is drawn."""

    loc: str
    job_id: str
    gpus: int
    submit: float
    """Seconds on the log's own clock (shifted to start at 0 by :func:`with_drawn_models`)."""
    duration_s: float
    features: dict[str, Any]
    """JobSpec's optional features: ``user``, ``group``, ``vc``, ``requested_s``."""


def with_drawn_models(
    runs: Sequence[Run], fmt: str, source: str, skipped: Iterable[tuple[str, str]], mix: ModelMix | None, seed: int
) -> Trace:
    """The trace of ``runs``: models drawn from ``mix`` (default ``random``) with
    ``numpy.random.default_rng(seed)`` in the runs' order, submits shifted to start at 0."""
    models = assign(len(runs), mix or mix_preset("random"), np.random.default_rng(seed))
    submits = normalise_submits([run.submit for run in runs])
    jobs = [
        make_job(
            run.loc, job_id=run.job_id, model=model, gpus=run.gpus, submit_time=t, duration_s=run.duration_s,
            **run.features,
        )
        for run, model, t in zip(runs, models, submits)
    ]
    return finish(jobs, fmt, source, skipped)


def make_job(loc: str, **fields: Any) -> JobSpec:
    """Build a JobSpec, adding ``loc`` to any complaint its own validation raises."""
    try:
        return JobSpec(**fields)
    except DeepShareError as exc:
        raise DeepShareError(f"{loc}: {exc}") from None


class IdRegistry:
    """Remembers job ids and where they were seen, to reject duplicates with both locations."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def add(self, job_id: str, loc: str, where: str) -> None:
        first = self._seen.get(job_id)
        if first is not None:
            raise DeepShareError(f"{loc}: duplicate job id {job_id!r} (first seen at {first})")
        self._seen[job_id] = where


def normalise_submits(times: Sequence[float]) -> list[float]:
    """Shift times so the earliest is 0 (traces that give wall-clock dates start anywhere)."""
    if not times:
        return []
    t0 = min(times)
    return [t - t0 for t in times]


# -- reading files -----------------------------------------------------------------------------
def read_text(path: str | os.PathLike[str]) -> str:
    """The file's text as UTF-8 (a leading BOM removed); clear errors for unreadable files.

    The file must be a regular file of at most :data:`~deepshare.core.files.TRACE_BYTES`
    (:func:`~deepshare.core.files.read_input_bytes`): ``/dev/zero`` or a FIFO is refused at once.
    """
    source = str(path)
    raw = read_input_bytes(path, "trace file", TRACE_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DeepShareError(
            f"{source} line {line}: expected UTF-8 text, got byte 0x{raw[exc.start]:02x} "
            "(binary or wrongly encoded file?)"
        ) from None
    text = text.removeprefix("\ufeff")
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise DeepShareError(f"{source} line {line}: expected text, found a NUL byte (binary file?)")
    if not text.strip():
        raise DeepShareError(f"{source}: file is empty, expected a trace")
    return text


class _Obj(dict):
    """A JSON object that remembers the first key it saw twice (json keeps only the last)."""

    duplicate: str | None = None


def _object_hook(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj()
    for key, value in pairs:
        if key in obj and obj.duplicate is None:
            obj.duplicate = key
        obj[key] = value
    return obj


def parse_json(text: str, source: str) -> Any:
    """Parse JSON through the guarded :func:`~deepshare.core.documents.load_json` (syntax errors
    located, nesting bounded), remembering each object's first duplicate key."""
    return load_json(text, source, "a JSON trace", object_pairs_hook=_object_hook)


def duplicate_key(obj: Any) -> str | None:
    """The first key a parsed JSON object held twice, or None."""
    return getattr(obj, "duplicate", None)


def _first_repeated(names: list[str]) -> str | None:
    """The first name seen twice, in one pass (comparing each with all before it took 14 s on a
    header of 40,000 columns)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def read_csv(
    text: str, source: str, fmt: str, required: Sequence[str], *, delimiter: str = ",",
    either: Sequence[Sequence[str]] = (),
) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """Header and ``(line number, {column: stripped value})`` rows of a CSV text.

    Blank lines are skipped. The header must name every ``required`` column (others are
    allowed), and all the columns of at least one group of ``either`` when it is given (Slurm:
    ``Elapsed``, or both ``Start`` and ``End``); each row must have exactly as many fields as the header, so a file cut mid-row
    is reported at the cut, not half-loaded. A ``delimiter`` other than a comma (Slurm's ``|``)
    also turns quoting off: such files write fields as they are, quotes included.
    """
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    numbered = numbered_rows(reader, source)
    header: list[str] | None = None
    header_line = 0
    for header_line, row in numbered:
        if any(cell.strip() for cell in row):
            header = [cell.strip() for cell in row]
            break
    if header is None:
        raise DeepShareError(f"{source}: file is empty, expected a CSV header")
    dup = _first_repeated(header)
    if dup is not None:
        raise DeepShareError(f"{source} line {header_line}: column {dup!r} appears twice in the header")
    absent = [c for c in required if c not in header]
    if absent:
        raise DeepShareError(
            f"{source} line {header_line}: missing required column(s) "
            f"{', '.join(repr(c) for c in absent)} for the {fmt} format; "
            f"the header has: {', '.join(h for h in header if h) or '(nothing)'}"
        )
    if either and not any(all(c in header for c in group) for group in either):
        def named(group: Sequence[str]) -> str:
            return ("both " if len(group) > 1 else "") + " and ".join(repr(c) for c in group)
        wanted = " and ".join(repr(c) for c in either[0]) + "".join(f" (or {named(g)})" for g in either[1:])
        raise DeepShareError(
            f"{source} line {header_line}: missing column {wanted} for the {fmt} format; "
            f"the header has: {', '.join(h for h in header if h) or '(nothing)'}"
        )

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        for line, row in numbered:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                hint = " (truncated row?)" if len(row) < len(header) else ""
                raise DeepShareError(
                    f"{source} line {line}: expected {len(header)} fields as in the header, "
                    f"got {len(row)}{hint}"
                )
            yield line, {name: cell.strip() for name, cell in zip(header, row)}

    return header, rows()


# -- field conversion --------------------------------------------------------------------------
def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def bad(loc: str, field: str, expected: str, got: Any) -> DeepShareError:
    return DeepShareError(f"{loc}: field {field!r}: expected {expected}, got {_show(got)}")


def missing(loc: str, field: str, expected: str) -> DeepShareError:
    return DeepShareError(f"{loc}: field {field!r}: expected {expected}, but it is missing")


def is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _as_float(value: int | float | str) -> float:
    """``float(value)``; a string not written as a number (:data:`deepshare.core.written.NUMBER`:
    ``1_000`` and other scripts' digits are not) raises ValueError."""
    if isinstance(value, str) and not NUMBER.fullmatch(value):
        raise ValueError(value)
    return float(value)


def number(value: Any, loc: str, field: str, *, minimum: str = "any", maximum: float | None = None) -> float:
    """A finite float from a JSON number or a CSV string (ASCII digits only: :func:`_as_float`).

    ``minimum``: ``"any"``, ``"nonnegative"`` (>= 0) or ``"positive"`` (> 0); ``maximum``: the
    largest value accepted, named in the error (None: any finite number).
    """
    expected = {"any": "a finite number", "nonnegative": "a non-negative number", "positive": "a positive number"}[
        minimum
    ]
    if maximum is not None:
        expected += f" up to {_bound(maximum)}"
    if is_blank(value):
        raise missing(loc, field, expected)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad(loc, field, expected, value)
    try:
        x = _as_float(value)
    except (ValueError, OverflowError):
        raise bad(loc, field, expected, value) from None
    if not math.isfinite(x):
        raise bad(loc, field, expected, value)
    if (minimum == "nonnegative" and x < 0) or (minimum == "positive" and x <= 0):
        raise bad(loc, field, expected, value)
    if maximum is not None and x > maximum:
        raise bad(loc, field, expected, value)
    return x


def _bound(x: float) -> str:
    """``31,536,000 (a year)``, ``65,536``, ``1e+11``: a bound as its error message writes it."""
    shown = f"{x:,.0f}" if x < 1e9 else f"{x:g}"
    return f"{shown} (a year)" if x == MAX_DURATION_S else shown


def seconds(value: Any, loc: str, field: str) -> float:
    """A run time or time limit: positive seconds, at most :data:`~deepshare.core.bounds.MAX_DURATION_S`."""
    return number(value, loc, field, minimum="positive", maximum=MAX_DURATION_S)


def timestamp(value: Any, loc: str, field: str) -> float:
    """A clock reading: seconds from 0 to :data:`~deepshare.core.bounds.MAX_TIMESTAMP_S`."""
    return number(value, loc, field, minimum="nonnegative", maximum=MAX_TIMESTAMP_S)


def _at_least(x: float, least: float, value: Any, loc: str, field: str, high: float) -> float:
    if x < least:
        raise bad(loc, field, f"a number from {least:g} to {_bound(high)}", value)
    return x


def work_seconds(value: Any, loc: str, field: str) -> float:
    """A job's run time (its work): from :data:`~deepshare.core.bounds.MIN_WORK_S` to
    :data:`~deepshare.core.bounds.MAX_DURATION_S`."""
    return _at_least(seconds(value, loc, field), MIN_WORK_S, value, loc, field, MAX_DURATION_S)


def samples(value: Any, loc: str, field: str) -> float:
    """Work in samples: from :data:`~deepshare.core.bounds.MIN_SAMPLES` to
    :data:`~deepshare.core.bounds.MAX_SAMPLES`."""
    x = number(value, loc, field, minimum="positive", maximum=MAX_SAMPLES)
    return _at_least(x, MIN_SAMPLES, value, loc, field, MAX_SAMPLES)


def check_seconds(value: float, loc: str, what: str) -> float:
    """A run time a reader computed (an end minus a start, a sum of attempts): refused past
    :data:`~deepshare.core.bounds.MAX_DURATION_S`; ``what`` names the fields it came from."""
    if not value <= MAX_DURATION_S:  # also NaN
        raise DeepShareError(f"{loc}: {what}: expected at most a year ({MAX_DURATION_S:,.0f} s), got {value:,.0f} s")
    return value


def integer(value: Any, loc: str, field: str, *, minimum: int = 1, maximum: int | None = MAX_JOB_GPUS) -> int:
    """An integer in ``minimum..maximum`` from a JSON number or CSV string ("4.0" is accepted as 4).

    The default bound is :data:`~deepshare.core.bounds.MAX_JOB_GPUS`, the readers' use being GPU
    counts; ``maximum=None`` accepts any finite whole number.
    """
    if maximum is None:
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    else:
        expected = f"a positive integer up to {_bound(maximum)}" if minimum == 1 else f"an integer from {minimum} to {_bound(maximum)}"
    if is_blank(value):
        raise missing(loc, field, expected)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad(loc, field, expected, value)
    if isinstance(value, int):
        n = value
    else:
        try:
            x = _as_float(value)
        except (ValueError, OverflowError):
            raise bad(loc, field, expected, value) from None
        if not math.isfinite(x) or x != int(x):
            raise bad(loc, field, expected, value)
        n = int(x)
    if n < minimum or (maximum is not None and n > maximum):
        raise bad(loc, field, expected, value)
    return n


def text_field(value: Any, loc: str, field: str, *, allow_int: bool = False) -> str:
    """A non-empty string (JSON ids may be integers when ``allow_int``), stripped."""
    expected = "a non-empty string"
    if allow_int and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None:
        raise missing(loc, field, expected)
    if not isinstance(value, str) or not value.strip():
        raise bad(loc, field, expected, value)
    return value.strip()


def optional_text(value: Any, loc: str, field: str) -> str | None:
    """A job feature such as a user, group or virtual cluster: stripped text, None when blank.

    Missing, null and empty values (how pandas writes NaN) all mean "the trace does not say";
    JSON numbers are accepted as names (hashed ids sometimes parse as numbers).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise bad(loc, field, "a name (text) or nothing", value)
    text = str(value).strip()
    return text or None


def optional_seconds(value: Any, loc: str, field: str) -> float | None:
    """A positive number of seconds up to a year (e.g. a requested time limit), None when blank or missing."""
    if is_blank(value):
        return None
    return seconds(value, loc, field)


FEATURES = ("user", "group", "vc", "requested_s")
"""JobSpec's optional features, in the order files write them."""


def features(row: Any, loc: str, names: dict[str, str]) -> dict[str, Any]:
    """JobSpec's optional features from ``row`` (a CSV row or JSON object).

    ``names`` maps a feature (``user``, ``group``, ``vc``, ``requested_s``) to the row's field
    that holds it; fields the row lacks give None.
    """
    out: dict[str, Any] = {}
    for feature, field in names.items():
        value = row.get(field)
        out[feature] = optional_seconds(value, loc, field) if feature == "requested_s" else optional_text(value, loc, field)
    return out


TOPOLOGY_FIELDS = ("required_level", "preferred_level", "slice_size", "slice_level")
"""A job's optional topology request (:class:`~deepshare.core.fabric.TopologyRequest`), in the
order files write them: level names, and ``slice_size`` a whole number of GPUs."""


def topology_request(row: Any, loc: str) -> TopologyRequest:
    """A job's topology request from ``row``'s optional :data:`TOPOLOGY_FIELDS` (a CSV row or
    JSON object); missing, null or empty fields: not asked, and none at all gives ``NO_TOPOLOGY``.

    A level name is text (JSON numbers are accepted as names, as :func:`optional_text` does);
    ``slice_size`` a positive integer up to 65,536; fields that do not go together (a required
    and a preferred level, a slice size without its level) are refused naming them. Whether the
    levels exist is the cluster's to say (the simulator rejects a job whose cluster lacks them).
    """
    values: dict[str, Any] = {}
    for field in TOPOLOGY_FIELDS:
        value = row.get(field)
        if field == "slice_size":
            values[field] = None if is_blank(value) else integer(value, loc, field)
        else:
            values[field] = optional_text(value, loc, field)
    if all(v is None for v in values.values()):
        return NO_TOPOLOGY
    try:
        return TopologyRequest(**values)
    except DeepShareError as exc:
        raise DeepShareError(f"{loc}: {exc}") from None


DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def datetime_seconds(value: Any, loc: str, field: str, *, optional: bool = False) -> float | None:
    """Seconds since the epoch of a ``YYYY-MM-DD HH:MM:SS`` date (naive dates are taken as UTC).

    With ``optional``, null, "" and "None" (how Philly writes a missing time) give None.
    """
    expected = "a date 'YYYY-MM-DD HH:MM:SS'"
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        if optional:
            return None
        raise missing(loc, field, expected)
    if not isinstance(value, str) or not value.strip().isascii():  # strptime reads any script's digits
        raise bad(loc, field, expected, value)
    try:
        when = datetime.strptime(value.strip(), DATETIME_FORMAT)
    except ValueError:
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise bad(loc, field, expected, value) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def require_mapping(value: Any, loc: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeepShareError(f"{loc}: expected {what} (a JSON object), got {type(value).__name__} {_show(value)}")
    dup = duplicate_key(value)
    if dup is not None:
        raise DeepShareError(f"{loc}: field {dup!r} is given twice")
    return value

