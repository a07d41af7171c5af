"""Loader for Helios ``cluster_log.csv`` (SenseTime, SC'21).

Header ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,
duration,queue``; only ``job_id``, ``gpu_num``, ``submit_time`` and ``duration`` are required.
``submit_time`` is either seconds or a date ``YYYY-MM-DD HH:MM:SS`` (one kind per file); it is
shifted so the earliest simulated job arrives at t = 0. ``duration`` (seconds actually run)
becomes ``duration_s``.

Features kept: ``user`` and ``vc`` (virtual cluster), and ``jobname`` as the job's ``group``
where the file has that column: the public ``cluster_log.csv`` does not, the full logs that
Helios' QSSF estimator and Lucid read (``cluster_full_log.csv``) do, and QSSF predicts a job's
duration from earlier jobs of the same user and job name (SC'21). The log has no time limit.

Skipped, with a reason: CPU jobs (``gpu_num`` 0) and jobs whose duration is empty or below a
picosecond (:data:`~deepshare.core.bounds.MIN_WORK_S`: pending or instantly failed jobs have nothing to simulate). The log names no models, so they
are drawn from ``mix`` with ``numpy.random.default_rng(seed)``, in file order of the kept jobs.
"""

from __future__ import annotations

import math
from typing import Any

from deepshare.core.bounds import MAX_DURATION_S, MIN_WORK_S
from deepshare.core.traces.base import (
    IdRegistry,
    Run,
    Trace,
    bad,
    datetime_seconds,
    features,
    integer,
    is_blank,
    number,
    read_csv,
    text_field,
    timestamp,
    with_drawn_models,
)
from deepshare.core.traces.mixes import ModelMix

FORMAT = "helios"
REQUIRED = ("job_id", "gpu_num", "submit_time", "duration")
_FEATURES = {"user": "user", "vc": "vc", "group": "jobname"}
"""JobSpec feature -> the log's column (absent columns give None)."""


def _submit(value: str, loc: str, kinds: dict[str, int], line: int) -> float:
    """Seconds from a number or a date; all rows of a file must use the same kind."""
    try:
        float(value)
        kind, other = "number", "date"
    except ValueError:
        kind, other = "date", "number"
    if other in kinds:
        raise bad(loc, "submit_time", f"a {other} like line {kinds[other]}'s", value)
    kinds.setdefault(kind, line)
    if kind == "number":
        return timestamp(value, loc, "submit_time")  # bounded like every clock reading: 1e20 lost its seconds
    return datetime_seconds(value, loc, "submit_time")  # type: ignore[return-value]


def parse(text: str, source: str, *, mix: ModelMix | None = None, seed: int = 0, **_: Any) -> Trace:
    """Jobs of a Helios cluster log (models drawn from ``mix``; default: the ``random`` preset)."""
    _, rows = read_csv(text, source, FORMAT, REQUIRED)
    ids = IdRegistry()
    kinds: dict[str, int] = {}
    kept: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for line, row in rows:
        loc = f"{source} line {line}"
        job_id = text_field(row["job_id"], loc, "job_id")
        ids.add(job_id, loc, f"line {line}")
        gpus = integer(row["gpu_num"], loc, "gpu_num", minimum=0)
        submit = _submit(row["submit_time"], loc, kinds, line)
        duration = math.nan if is_blank(row["duration"]) else number(row["duration"], loc, "duration", maximum=MAX_DURATION_S)
        if gpus == 0:
            skipped.append((job_id, f"line {line}: CPU job (gpu_num 0)"))
        elif not duration >= MIN_WORK_S:  # also NaN
            shown = "missing" if math.isnan(duration) else f"{duration:g} s"
            skipped.append((job_id, f"line {line}: nothing to simulate (duration {shown})"))
        else:
            kept.append(Run(loc, job_id, gpus, submit, duration, features(row, loc, _FEATURES)))
    return with_drawn_models(kept, FORMAT, source, skipped, mix, seed)
