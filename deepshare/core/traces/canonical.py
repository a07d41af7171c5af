"""The project's own trace format: a plain CSV any tool can write.

Header (extra columns are allowed and ignored)::

    job_id,submit_time,model,gpus,duration_s,total_samples

* ``job_id``: non-empty, unique; ``model``: a catalog model or any name (mapped to a proxy);
* ``submit_time``: seconds, >= 0; ``gpus``: a positive integer;
* exactly one of ``duration_s`` (isolated run time at the reference placement, seconds) and
  ``total_samples`` (samples to train) is non-empty in each row; the other is left empty.

:func:`write_canonical` writes numbers with ``repr`` so that loading the file gives back the
very same jobs, and writes atomically (a temporary file, then ``os.replace``) so a crash never
leaves a half-written trace behind.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Iterable

from deepshare.core.traces.base import (
    IdRegistry,
    Trace,
    finish,
    integer,
    is_blank,
    make_job,
    number,
    read_csv,
    text_field,
)
from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec

FORMAT = "canonical"
COLUMNS = ("job_id", "submit_time", "model", "gpus", "duration_s", "total_samples")


def parse(text: str, source: str, **_: Any) -> Trace:
    """Jobs of a canonical CSV."""
    _, rows = read_csv(text, source, FORMAT, COLUMNS)
    ids = IdRegistry()
    jobs = []
    for line, row in rows:
        loc = f"{source} line {line}"
        job_id = text_field(row["job_id"], loc, "job_id")
        ids.add(job_id, loc, f"line {line}")
        has_duration, has_samples = not is_blank(row["duration_s"]), not is_blank(row["total_samples"])
        if has_duration == has_samples:
            raise DeepShareError(
                f"{loc}: fields 'duration_s' and 'total_samples': expected exactly one to be non-empty, "
                f"got {'both' if has_duration else 'neither'}"
            )
        jobs.append(
            make_job(
                loc,
                job_id=job_id,
                model=text_field(row["model"], loc, "model"),
                gpus=integer(row["gpus"], loc, "gpus"),
                submit_time=number(row["submit_time"], loc, "submit_time", minimum="nonnegative"),
                duration_s=number(row["duration_s"], loc, "duration_s", minimum="positive") if has_duration else None,
                total_samples=(
                    number(row["total_samples"], loc, "total_samples", minimum="positive") if has_samples else None
                ),
            )
        )
    return finish(jobs, FORMAT, source)


def _check_text(value: str, job: JobSpec, field: str) -> None:
    """Reject names that could not be read back unchanged (loaders strip whitespace)."""
    if not value.strip() or value != value.strip() or any(c in value for c in "\x00\r\n"):
        raise DeepShareError(
            f"cannot write job {job.job_id!r}: {field} {value!r} must be non-empty, on one line, without "
            "surrounding whitespace or NUL characters"
        )


def write_canonical(trace_or_jobs: Trace | Iterable[JobSpec], path: str | os.PathLike[str]) -> Path:
    """Write jobs as a canonical CSV at ``path`` atomically; returns the path."""
    jobs = list(trace_or_jobs.jobs if isinstance(trace_or_jobs, Trace) else trace_or_jobs)
    seen: set[str] = set()
    for job in jobs:
        if not isinstance(job, JobSpec):
            raise DeepShareError(f"cannot write {job!r}: expected a JobSpec")
        _check_text(job.job_id, job, "job id")
        _check_text(job.model, job, "model")
        if job.job_id in seen:
            raise DeepShareError(f"cannot write: duplicate job id {job.job_id!r}")
        seen.add(job.job_id)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for job in jobs:
        writer.writerow(
            (
                job.job_id,
                repr(float(job.submit_time)),
                job.model,
                job.gpus,
                "" if job.duration_s is None else repr(float(job.duration_s)),
                "" if job.total_samples is None else repr(float(job.total_samples)),
            )
        )
    return write_text_atomic(path, out.getvalue(), "trace")
