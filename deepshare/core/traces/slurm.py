"""Loader for Slurm accounting records, as ``sacct`` prints them.

Make the file on a Slurm cluster with (``-S``/``-E`` choose the period; sacct's default is
since midnight; ``TZ=UTC``: sacct prints times in its local zone, and the loader reads times
without a zone as UTC, so a local clock's daylight-saving jump would shift arrivals by an hour)::

    TZ=UTC sacct --parsable2 --allusers -S 2024-01-01 -E 2024-03-01 \\
          --format=JobID,JobName,User,Submit,Start,End,Elapsed,Timelimit,AllocTRES,State > jobs.txt

That is ``|``-separated text with a header line (``--parsable``, with a ``|`` at each line's
end, reads the same; fields are never quoted). Required columns: ``JobID``, ``Submit``,
``AllocTRES`` and ``Elapsed`` (or ``Start`` and ``End``); ``JobName``, ``User``, ``Timelimit`` and
``State`` are used when present; others are ignored.

* Rows whose ``JobID`` has a dot are job steps (``123.batch``, ``123.extern``, ``123.0``): parts
  of a job listed on its own row, so they are passed over (``-X`` leaves them out anyway).
  Array tasks (``123_4``) and heterogeneous components (``123+0``) are jobs of their own.
* GPUs: from ``AllocTRES`` (``billing=8,cpu=8,gres/gpu=2,gres/gpu:a100=2,mem=64G,node=1``):
  ``gres/gpu=N`` when present, else the sum of the typed ``gres/gpu:TYPE=N`` entries.
* Duration: ``Elapsed`` (``[D-]HH:MM:SS``, what Slurm accounts as run time), else ``End`` minus
  ``Start``. Submit times (ISO dates, ``2024-01-05T10:11:12``) are shifted so the earliest
  simulated job arrives at t = 0.
* Features: ``user`` = ``User``; ``requested_s`` = ``Timelimit`` (``UNLIMITED``,
  ``Partition_Limit``, empty or zero: no limit, None); ``group`` = ``JobName``. Slurm has no
  recurring-job tag; the job name (``--job-name`` or the batch script's name) is what reruns of
  one experiment share, and it is what Helios' QSSF (a Slurm cluster, SC'21) matches earlier
  jobs on, together with the user. Generic names (``bash``, ``interactive``) then group
  unrelated jobs: policies should key on user and group together.

Times (``Elapsed``, ``Timelimit``) follow Slurm's formats: ``MM``, ``MM:SS``, ``HH:MM:SS``,
``D-HH``, ``D-HH:MM`` or ``D-HH:MM:SS``, seconds possibly with a fraction (``MM:SS.mmm``).
Minutes and seconds after a larger unit are 0-59 and hours after a day count 0-23: ``1:99:99``
or ``1-24:00:00`` is refused, not read as some number of seconds. Run times and time limits are
at most a year (:data:`~deepshare.core.bounds.MAX_DURATION_S`; a longer limit is refused,
``UNLIMITED`` says "no limit"), and a job holds at most 65,536 GPUs
(:data:`~deepshare.core.bounds.MAX_JOB_GPUS`).

Skipped, with a reason: jobs that have not finished (``State`` other than COMPLETED, FAILED,
CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, DEADLINE, BOOT_FAIL, REVOKED or
SPECIAL_EXIT, e.g. PENDING or RUNNING, or an unknown ``End``), jobs without a GPU (CPU jobs,
and jobs cancelled before they got any) and jobs that ran for no time or less than a picosecond
(:data:`~deepshare.core.bounds.MIN_WORK_S`). The records name no
models, so they are drawn from ``mix`` with ``numpy.random.default_rng(seed)``, in order of the
kept jobs.
"""

from __future__ import annotations

import re
from typing import Any

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MIN_WORK_S
from deepshare.core.traces.base import (
    IdRegistry,
    Run,
    Trace,
    bad,
    check_seconds,
    datetime_seconds,
    is_blank,
    missing,
    optional_text,
    read_csv,
    text_field,
    with_drawn_models,
)
from deepshare.core.traces.mixes import ModelMix

FORMAT = "slurm"
REQUIRED = ("JobID", "Submit", "AllocTRES")
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "DEADLINE",
     "BOOT_FAIL", "REVOKED", "SPECIAL_EXIT"}
)
NO_LIMIT = frozenset({"UNLIMITED", "PARTITION_LIMIT", "NONE", "INFINITE"})
_WHOLE = re.compile(r"[0-9]+")
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_TIME_EXPECTED = (
    "a Slurm time such as '1-02:03:04', '02:03:04' or '03:04' "
    "(minutes and seconds 0-59, hours 0-23 after a day count)"
)
_UNITS = {
    (False, 1): (60,), (False, 2): (60, 1), (False, 3): (3600, 60, 1),
    (True, 1): (3600,), (True, 2): (3600, 60), (True, 3): (3600, 60, 1),
}
"""Seconds in each ':'-separated field, by (a ``D-`` day part given, number of fields)."""
_BELOW = {3600: 24, 60: 60, 1: 60}
"""A field after a larger unit counts less than one of that unit: hours < 24, minutes and seconds < 60."""


def slurm_seconds(value: str, loc: str, field: str) -> float:
    """Seconds of a Slurm time: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.

    Seconds may have a fraction (``MM:SS.mmm``, as sacct prints CPU times). The leading field
    counts its unit freely (``90`` is 90 minutes, ``25:00:00`` 25 hours, as ``sbatch --time``
    reads them), every later one stays below the unit before it: ``1:99:99`` and ``1-24:00:00``
    are refused, not read as 9,639 s or 2 days. Times past a year
    (:data:`~deepshare.core.bounds.MAX_DURATION_S`) are refused too.
    """
    text = value.strip()
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "", text
    parts = rest.split(":")
    units = _UNITS.get((bool(dash), len(parts)))
    if (
        units is None
        or (dash and not _WHOLE.fullmatch(days))
        or not all(_WHOLE.fullmatch(p) for p in parts[:-1])
        or not (_SECONDS if units[-1] == 1 else _WHOLE).fullmatch(parts[-1])
    ):
        raise bad(loc, field, _TIME_EXPECTED, value)
    numbers = [float(p) for p in parts]
    bounded = zip(numbers, units) if dash else zip(numbers[1:], units[1:])
    if any(n >= _BELOW[unit] for n, unit in bounded):
        raise bad(loc, field, _TIME_EXPECTED, value)
    seconds = (float(days) * 86400 if dash else 0.0) + sum(n * unit for n, unit in zip(numbers, units))
    if seconds > MAX_DURATION_S:  # also an infinity, from hundreds of digits
        raise bad(loc, field, "a Slurm time of at most a year (365-00:00:00)", value)
    return seconds


def alloc_gpus(value: str, loc: str) -> int:
    """GPUs in an ``AllocTRES`` list: ``gres/gpu=N``, else the sum of ``gres/gpu:TYPE=N``; at
    most :data:`~deepshare.core.bounds.MAX_JOB_GPUS`."""
    plain: int | None = None
    typed = 0
    for entry in filter(None, (e.strip() for e in value.split(","))):
        key, sep, count = entry.partition("=")
        if not sep:
            raise bad(loc, "AllocTRES", "comma-separated 'name=count' entries", value)
        key = key.strip().lower()
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            digits = count.strip()
            if not _WHOLE.fullmatch(digits):
                raise bad(loc, "AllocTRES", f"a whole number of GPUs in {entry!r}", value)
            n = int(digits) if len(digits) <= 9 else MAX_JOB_GPUS + 1  # int() refuses thousands of digits
            if key == "gres/gpu":
                plain = n
            else:
                typed += n
    gpus = typed if plain is None else plain
    if gpus > MAX_JOB_GPUS:
        raise bad(loc, "AllocTRES", f"at most {MAX_JOB_GPUS:,} GPUs", value)
    return gpus


def _limit(row: dict[str, str], loc: str) -> float | None:
    value = row.get("Timelimit")
    if is_blank(value) or value.strip().upper() in NO_LIMIT:  # type: ignore[union-attr]
        return None
    seconds = slurm_seconds(value, loc, "Timelimit")  # type: ignore[arg-type]
    return seconds if seconds > 0 else None


def _run_seconds(row: dict[str, str], loc: str) -> float | None:
    """Elapsed seconds, else End - Start; None when the job has no end yet."""
    if "Elapsed" in row and not is_blank(row["Elapsed"]):
        return slurm_seconds(row["Elapsed"], loc, "Elapsed")
    if "Start" not in row or "End" not in row:
        raise missing(loc, "Elapsed", "a run time (or the 'Start' and 'End' columns)")
    start = datetime_seconds(row["Start"].replace("Unknown", ""), loc, "Start", optional=True)
    end = datetime_seconds(row["End"].replace("Unknown", ""), loc, "End", optional=True)
    if start is None or end is None:
        return None
    return check_seconds(end - start, loc, "fields 'Start' and 'End': run time (End minus Start)")


def _why_skipped(row: dict[str, str], gpus: int, seconds: float | None) -> str | None:
    state = (row.get("State") or "").split(" ")[0].rstrip("+").upper()
    if state and state not in FINISHED:
        return f"not finished (State {state})"
    if "End" in row and row["End"].strip() in ("Unknown", "None", ""):
        return "not finished (End unknown)"
    if gpus == 0:
        return "no GPU allocated (AllocTRES has no gres/gpu)"
    if seconds is None:
        return "not finished (no End)"
    if seconds <= 0:
        return "ran for no time"
    if seconds < MIN_WORK_S:  # as the other readers: shorter than a picosecond is nothing to simulate
        return f"ran for {seconds:g} s, less than {MIN_WORK_S:g} s"
    return None


def parse(text: str, source: str, *, mix: ModelMix | None = None, seed: int = 0, **_: Any) -> Trace:
    """Jobs of ``sacct --parsable2`` output (models drawn from ``mix``; default: ``random``)."""
    _, rows = read_csv(text, source, FORMAT, REQUIRED, delimiter="|", either=(("Elapsed",), ("Start", "End")))
    ids = IdRegistry()
    kept: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for line, row in rows:
        loc = f"{source} line {line}"
        job_id = text_field(row["JobID"], loc, "JobID")
        if "." in job_id:
            continue  # a job step
        ids.add(job_id, loc, f"line {line}")
        submit = datetime_seconds(row["Submit"], loc, "Submit")
        gpus = alloc_gpus(row["AllocTRES"], loc)
        seconds = _run_seconds(row, loc)
        feats = {
            "user": optional_text(row.get("User"), loc, "User"),
            "group": optional_text(row.get("JobName"), loc, "JobName"),
            "requested_s": _limit(row, loc),
        }
        reason = _why_skipped(row, gpus, seconds)
        if reason is None:
            kept.append(Run(loc, job_id, gpus, submit, seconds, feats))  # type: ignore[arg-type]
        else:
            skipped.append((job_id, f"line {line}: {reason}"))
    return with_drawn_models(kept, FORMAT, source, skipped, mix, seed)
