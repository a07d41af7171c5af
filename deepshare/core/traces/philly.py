"""Loader for Microsoft Philly's ``cluster_job_log`` (ATC'19 trace).

The log is a JSON list of jobs::

    {"jobid": "application_...", "submitted_time": "2017-10-03 02:03:49", "status": "Pass",
     "attempts": [{"start_time": "...", "end_time": "...",
                   "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}, ...]}, ...]}

* GPUs: the largest total over one attempt of ``len(gpus)`` across its ``detail`` entries;
* duration: the sum over attempts of ``end_time - start_time`` (attempts with a missing,
  ``null`` or ``"None"`` time are left out of the sum);
* submit times are shifted so the earliest simulated job arrives at t = 0; the log's times carry
  no zone and are read as UTC (the trace's other tables stamp US Pacific time: an attempt across
  a daylight-saving change, if the log is local time, is an hour off);
* ``user`` and ``vc`` (virtual cluster) are kept as the job's features; the log has no job
  name, recurring-job tag or time limit.

Skipped, with a reason: jobs with no attempt that has both a start and an end (they never ran),
jobs that held no GPU, jobs with an attempt that ends before it starts (a clock glitch in the
log, not something to guess around) and jobs whose attempts add up to no positive run time. The log names no
models, so they are drawn from ``mix`` with ``numpy.random.default_rng(seed)``, in file order of
the kept jobs.
"""

from __future__ import annotations

from typing import Any

from deepshare.core.bounds import MAX_JOB_GPUS
from deepshare.core.errors import DeepShareError
from deepshare.core.traces.base import (
    IdRegistry,
    Run,
    Trace,
    bad,
    check_seconds,
    datetime_seconds,
    features,
    missing,
    parse_json,
    require_mapping,
    text_field,
    with_drawn_models,
)
from deepshare.core.traces.mixes import ModelMix

FORMAT = "philly"
_FEATURES = {"user": "user", "vc": "vc"}
"""JobSpec feature -> the log's key."""


def _attempts(job: dict[str, Any], loc: str) -> tuple[int, float, int, str | None]:
    """(max GPUs of one complete attempt, summed run seconds, complete attempts, why it can't run
    or None). A last attempt that started and has no end means the job was still running when the
    log was taken (the trace's README): its run time is unknown, so the job cannot be replayed. An
    earlier attempt without both times is a logging gap and is passed over."""
    attempts = job.get("attempts")
    if attempts is None:
        raise missing(loc, "attempts", "a list of attempts")
    if not isinstance(attempts, list):
        raise bad(loc, "attempts", "a list of attempts", attempts)
    gpus, seconds, complete, problem = 0, 0.0, 0, None
    for i, attempt in enumerate(attempts):
        where = f"attempts[{i}]"
        attempt = require_mapping(attempt, f"{loc} {where}", "an attempt")
        detail = attempt.get("detail", [])
        if detail is None:
            detail = []
        if not isinstance(detail, list):
            raise bad(loc, f"{where}.detail", "a list of {'ip', 'gpus'} entries", detail)
        total = 0
        for k, entry in enumerate(detail):
            entry = require_mapping(entry, f"{loc} {where}.detail[{k}]", "a detail entry")
            held = entry.get("gpus", [])
            if not isinstance(held, list):
                raise bad(loc, f"{where}.detail[{k}].gpus", "a list of GPU names", held)
            total += len(held)
        if total > MAX_JOB_GPUS:  # named here: JobSpec would name its own field, not the log's
            raise bad(loc, f"{where}.detail", f"at most {MAX_JOB_GPUS:,} GPUs in all (len of each entry's gpus)", total)
        start = datetime_seconds(attempt.get("start_time"), loc, f"{where}.start_time", optional=True)
        end = datetime_seconds(attempt.get("end_time"), loc, f"{where}.end_time", optional=True)
        if start is not None and end is None and i == len(attempts) - 1 and problem is None:
            problem = f"still running when the log was taken ({where} has a start_time and no end_time)"
        if start is None or end is None:
            continue
        gpus = max(gpus, total)
        if end < start and problem is None:
            problem = f"{where} ends before it starts"
        complete += 1
        seconds += end - start
    return gpus, seconds, complete, problem


def parse(text: str, source: str, *, data: Any = None, mix: ModelMix | None = None, seed: int = 0, **_: Any) -> Trace:
    """Jobs of a Philly job log (models drawn from ``mix``; default: the ``random`` preset)."""
    if data is None:
        data = parse_json(text, source)
    if not isinstance(data, list):
        raise DeepShareError(
            f"{source}: expected a JSON list of jobs (Philly format), got a JSON "
            f"{'object' if isinstance(data, dict) else type(data).__name__}"
        )
    if not data:
        raise DeepShareError(f"{source}: expected at least one job, the list is empty")
    ids = IdRegistry()
    kept: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for index, entry in enumerate(data):
        loc = f"{source} job at index {index}"
        entry = require_mapping(entry, loc, "a job")
        job_id = text_field(entry.get("jobid"), loc, "jobid", allow_int=True)
        loc = f"{source} job {job_id!r} (index {index})"
        ids.add(job_id, loc, f"index {index}")
        submit = datetime_seconds(entry.get("submitted_time"), loc, "submitted_time")
        gpus, seconds, complete, problem = _attempts(entry, loc)
        if problem is not None:
            skipped.append((job_id, f"index {index}: {problem}"))
        elif complete == 0:
            skipped.append((job_id, f"index {index}: never ran (no attempt with both a start and an end time)"))
        elif gpus == 0:
            skipped.append((job_id, f"index {index}: no GPU recorded in any attempt"))
        elif seconds <= 0:
            skipped.append((job_id, f"index {index}: attempts add up to no run time"))
        else:
            check_seconds(seconds, loc, "attempts: run time (the sum of end_time - start_time)")
            kept.append(Run(loc, job_id, gpus, submit, seconds, features(entry, loc, _FEATURES)))  # type: ignore[arg-type]
    return with_drawn_models(kept, FORMAT, source, skipped, mix, seed)
