"""The project's own trace format: a plain CSV any tool can write.

Header (extra columns are allowed and ignored)::

    job_id,submit_time,model,gpus,duration_s,total_samples

* ``job_id``: non-empty, unique; ``model``: a catalog model or any name (mapped to a proxy);
  every name (these, and the optional columns' below) on one line: a quoted line break or a NUL
  is refused with the line and the column, as :func:`write_canonical` refuses to write one;
* ``submit_time``: seconds, from 0 to 10^11; ``gpus``: an integer from 1 to 65,536;
* exactly one of ``duration_s`` (isolated run time at the reference placement, seconds, from
  10^-12 to a year: 31,536,000) and ``total_samples`` (samples to train, from 10^-18 to 10^18, and
  from 10^-12 s to a year of run time at the catalog's reference throughput, which the simulator
  checks) is non-empty in each row; the other is left empty.

Optional columns, the job's features (an empty cell: the trace does not say)::

    user,group,vc,requested_s

``user``, ``group`` (a recurring job's tag), ``vc`` (virtual cluster or team) are names;
``requested_s`` is the user's time limit or estimate in seconds (positive, at most a year).
These are the bounds of :mod:`deepshare.core.bounds`; a value past one (or NaN, or an infinity) is
refused with the line and the column, never clipped.

Optional columns, the job's tenancy (:mod:`deepshare.tenants`; an empty cell: not said)::

    queue,priority

``queue`` names the tenant queue it is submitted to, ``priority`` its priority class; the tenants
file (``--tenants``) says what they mean, and without one nothing reads them.

Optional columns, the job's topology request (:class:`~deepshare.core.fabric.TopologyRequest`,
Kueue's meaning; an empty cell: not asked)::

    required_level,preferred_level,slice_size,slice_level

``required_level``: all its GPUs inside one domain of that fabric level, or it waits;
``preferred_level``: inside one such domain if any has room, else anywhere (not with
``required_level``); ``slice_size`` (an integer from 1 to 65,536 dividing ``gpus``) GPUs at a
time inside one domain of ``slice_level`` (the two go together). Level names are the cluster's
(``rack`` on a spec without ``levels``); the simulator rejects a job whose cluster lacks them.

:func:`write_canonical` writes a feature's, request field's or tenancy column only when some job has it.

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
    FEATURES,
    TOPOLOGY_FIELDS,
    IdRegistry,
    bad,
    features,
    Trace,
    finish,
    integer,
    is_blank,
    make_job,
    read_csv,
    samples,
    optional_text,
    text_field,
    timestamp,
    topology_request,
    work_seconds,
)
from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.traces.mixes import on_one_line
from deepshare.core.types import JobSpec

FORMAT = "canonical"
COLUMNS = ("job_id", "submit_time", "model", "gpus", "duration_s", "total_samples")
TENANCY = ("queue", "priority")
"""Optional columns naming the job's tenant queue and priority class, in the order written."""


def parse(text: str, source: str, **_: Any) -> Trace:
    """Jobs of a canonical CSV."""
    _, rows = read_csv(text, source, FORMAT, COLUMNS)
    ids = IdRegistry()
    jobs = []
    for line, row in rows:
        loc = f"{source} line {line}"
        job_id = _one_line(text_field(row["job_id"], loc, "job_id"), loc, "job_id")
        ids.add(job_id, loc, f"line {line}")
        has_duration, has_samples = not is_blank(row["duration_s"]), not is_blank(row["total_samples"])
        if has_duration == has_samples:
            raise DeepShareError(
                f"{loc}: fields 'duration_s' and 'total_samples': expected exactly one to be non-empty, "
                f"got {'both' if has_duration else 'neither'}"
            )
        fields = dict(  # in the columns' order, so a row's first problem is the one named
            model=_one_line(text_field(row["model"], loc, "model"), loc, "model"),
            gpus=integer(row["gpus"], loc, "gpus"),
            submit_time=timestamp(row["submit_time"], loc, "submit_time"),
            duration_s=work_seconds(row["duration_s"], loc, "duration_s") if has_duration else None,
            total_samples=samples(row["total_samples"], loc, "total_samples") if has_samples else None,
            **features(row, loc, {name: name for name in FEATURES}),
            topology=topology_request(row, loc),
            **{name: optional_text(row.get(name), loc, name) for name in TENANCY},
        )
        named = [(name, fields[name]) for name in (*FEATURES, *TENANCY)]
        named += [(name, getattr(fields["topology"], name)) for name in ("required_level", "preferred_level", "slice_level")]
        for name, value in named:
            if isinstance(value, str):  # the names the writer checks (requested_s is a number)
                _one_line(value, loc, name)
        jobs.append(make_job(loc, job_id=job_id, **fields))
    return finish(jobs, FORMAT, source)


def _one_line(value: str, loc: str, field: str) -> str:
    """``value`` (a stripped name) when :func:`write_canonical` would write it back (no line break
    or NUL: :func:`~deepshare.core.traces.mixes.on_one_line`), else the line's error naming the
    field: a quoted ``"j1\n2"`` read as a job id no printed line or written trace could hold."""
    if not on_one_line(value):
        raise bad(loc, field, "a name on one line (no line breaks or NUL characters)", value)
    return value


def _check_text(value: str, job: JobSpec, field: str) -> None:
    """Reject names that could not be read back unchanged (loaders strip whitespace)."""
    if not on_one_line(value):
        raise DeepShareError(
            f"cannot write job {job.job_id!r}: {field} {value!r} must be non-empty, on one line, without "
            "surrounding whitespace or NUL characters"
        )


def _number(value: float | None) -> str:
    """``repr`` of a float reads back as the very same float; None is an empty cell."""
    return "" if value is None else repr(float(value))


def _cell(feature: str | float | None) -> str:
    """A feature's cell: a name as it is, a number as :func:`_number` writes it."""
    return feature if isinstance(feature, str) else _number(feature)


def _request_cell(value: str | int | None) -> str:
    """A topology request field's cell: a level's name as it is, a slice size as an integer."""
    return "" if value is None else str(value)


def write_canonical(trace_or_jobs: Trace | Iterable[JobSpec], path: str | os.PathLike[str]) -> Path:
    """Write jobs as a canonical CSV at ``path`` atomically; returns the path."""
    jobs = list(trace_or_jobs.jobs if isinstance(trace_or_jobs, Trace) else trace_or_jobs)
    seen: set[str] = set()
    for job in jobs:
        if not isinstance(job, JobSpec):
            raise DeepShareError(f"cannot write {job!r}: expected a JobSpec")
        _check_text(job.job_id, job, "job id")
        _check_text(job.model, job, "model")
        for name in ("user", "group", "vc", *TENANCY):
            if getattr(job, name) is not None:
                _check_text(getattr(job, name), job, name)
        for name in ("required_level", "preferred_level", "slice_level"):
            if getattr(job.topology, name) is not None:
                _check_text(getattr(job.topology, name), job, name)
        if job.job_id in seen:
            raise DeepShareError(f"cannot write: duplicate job id {job.job_id!r}")
        seen.add(job.job_id)
    present = [name for name in FEATURES if any(getattr(job, name) is not None for job in jobs)]
    tenancy = [name for name in TENANCY if any(getattr(job, name) is not None for job in jobs)]
    asked = [name for name in TOPOLOGY_FIELDS if any(getattr(job.topology, name) is not None for job in jobs)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((*COLUMNS, *present, *asked, *tenancy))
    for job in jobs:
        writer.writerow(
            (
                job.job_id,
                repr(float(job.submit_time)),
                job.model,
                job.gpus,
                _number(job.duration_s),
                _number(job.total_samples),
                *(_cell(getattr(job, name)) for name in present),
                *(_request_cell(getattr(job.topology, name)) for name in asked),
                *(getattr(job, name) for name in tenancy),
            )
        )
    return write_text_atomic(path, out.getvalue(), "trace")
