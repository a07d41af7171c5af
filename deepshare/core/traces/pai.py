"""Loader for the Alibaba PAI 2020 GPU trace (``alibaba/clusterdata``, ``cluster-trace-gpu-v2020``).

The trace ships its tables as header-less CSVs, each with a ``.header`` file naming its columns
(NSDI'22, "MLaaS in the Wild"). This loader reads one CSV *with a header* and one row per
**task** of a job, as in ``pai_task_table``::

    job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type

Two ways to make that file from the downloaded trace:

* the task table alone (no users, group tags or submission times)::

      cat pai_task_table.header pai_task_table.csv > pai_tasks.csv

* the task table joined with the job table (``user``; the job's ``start_time``, its
  submission time, becomes ``start_time_j``) and the group tag table (``group``), the join the
  trace's own ``analysis/utils.py`` (``get_dfa``) makes::

      import pandas as pd
      def table(name):
          return pd.read_csv(f"{name}.csv", header=None, names=pd.read_csv(f"{name}.header").columns)
      tasks = table("pai_task_table").merge(table("pai_job_table"), on="job_name", suffixes=("", "_j"))
      tags = table("pai_group_tag_table").drop(columns="user")
      tasks.merge(tags, on="inst_id", how="left").to_csv("pai_tasks.csv", index=False)

Required columns: ``job_name``, ``inst_num``, ``plan_gpu``, ``start_time``, ``end_time``; used when
present: ``task_name`` (a task listed twice is an error; a blank one is an unnamed task), ``start_time_j``, ``user``, ``group``.
Other columns are ignored. A job is every row with its ``job_name`` (the job's id here), in
order of first appearance:

* GPUs: ``plan_gpu`` is percent of one GPU per instance (50 = half a GPU, 800 = eight GPUs;
  a fraction such as 12.5 is fine), so a job asks for ``sum(inst_num * plan_gpu) / 100`` GPUs;
  an empty ``plan_gpu`` is a CPU task (0). ``inst_num`` counts instances, so it must be a whole
  number (``2.5`` is refused, not rounded). The simulator allocates whole GPUs, so a fractional
  total (GPU sharing, common in PAI) is **rounded up**: half a GPU becomes one. A job's total
  must stay within 65,536 GPUs (:data:`~deepshare.core.bounds.MAX_JOB_GPUS`): the row that
  passes it is refused;
* times are seconds from 0 to 10^11 (:data:`~deepshare.core.bounds.MAX_TIMESTAMP_S`); an empty
  time or 0 means unknown (as the trace's analysis reads them).
  The run time is the latest task end minus the earliest task start, at most a year (a job
  that ran longer is refused: :data:`~deepshare.core.bounds.MAX_DURATION_S`); the submission time is
  ``start_time_j`` when present and known, else the earliest task start (no queueing seen).
  Submit times are shifted so the earliest simulated job arrives at t = 0;
* features: ``user`` and ``group`` (the group tag: a hash of entry script, parameters and data
  sources, so a group's jobs are reruns of one job). Rows without a tag keep ``group`` None
  (the trace's analysis fills it with the user; that would merge unrelated jobs). The trace
  has no virtual cluster or time limit.

Skipped, with a reason: CPU jobs (no GPU in any task), jobs with a task of unknown instance
count, jobs still running (a task started but has no end), jobs that never ran (no task with
both times), jobs with a task that ends before it starts, and jobs with no positive run time
or one below a picosecond (:data:`~deepshare.core.bounds.MIN_WORK_S`).
The trace names no models, so they are drawn from ``mix`` with
``numpy.random.default_rng(seed)``, in order of the kept jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from deepshare.core.bounds import MAX_JOB_GPUS, MIN_WORK_S
from deepshare.core.errors import DeepShareError
from deepshare.core.traces.base import (
    Run,
    Trace,
    check_seconds,
    integer,
    is_blank,
    number,
    optional_text,
    read_csv,
    text_field,
    timestamp,
    with_drawn_models,
)
from deepshare.core.traces.mixes import ModelMix

FORMAT = "pai"
REQUIRED = ("job_name", "inst_num", "plan_gpu", "start_time", "end_time")
_MAX_PERCENT = 100.0 * MAX_JOB_GPUS
"""Largest ``plan_gpu`` of one instance: every GPU a job may hold, in percent of a GPU."""


@dataclass
class _Job:
    """What the rows of one job add up to."""

    line: int
    gpu_percent: float = 0.0
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    submit: float | None = None
    user: str | None = None
    group: str | None = None
    problem: str | None = None
    tasks: dict[str, int] = field(default_factory=dict)


def _time(row: dict[str, str], loc: str, column: str) -> float | None:
    """Seconds in ``column``, None when the column is absent, empty or 0 (unknown)."""
    value = row.get(column)
    if is_blank(value):
        return None
    seconds = timestamp(value, loc, column)
    return seconds if seconds > 0 else None


def _whole_gpus(percent: float) -> int:
    """GPUs for ``percent`` (> 0) of one GPU, rounded up (float noise such as 99.999999 is 1):
    at least one, however small the share."""
    share = percent / 100.0
    nearest = round(share)
    return max(1, int(nearest) if abs(share - nearest) < 1e-6 else math.ceil(share))


def _add_task(job: _Job, row: dict[str, str], line: int, loc: str) -> None:
    task = row.get("task_name")
    if task:  # a blank name is an unnamed task, never a duplicate of another
        first = job.tasks.setdefault(task, line)
        if first != line:
            raise DeepShareError(
                f"{loc}: task {task!r} of job {row['job_name']!r} appears twice (first at line {first}); "
                "expected one row per task (was a table joined twice?)"
            )
    name = task or f"at line {line}"
    if is_blank(row["inst_num"]):
        job.problem = job.problem or f"task {name} has no instance count"
    else:
        instances = integer(row["inst_num"], loc, "inst_num", minimum=0, maximum=None)
        gpu = 0.0 if is_blank(row["plan_gpu"]) else number(
            row["plan_gpu"], loc, "plan_gpu", minimum="nonnegative", maximum=_MAX_PERCENT
        )
        job.gpu_percent += instances * gpu
        if not (math.isfinite(job.gpu_percent) and _whole_gpus(job.gpu_percent) <= MAX_JOB_GPUS):
            raise DeepShareError(
                f"{loc}: fields 'inst_num' and 'plan_gpu': expected job {row['job_name']!r} to ask for at most "
                f"{MAX_JOB_GPUS:,} GPUs in all (the sum of inst_num x plan_gpu / 100 over its tasks), "
                f"got {job.gpu_percent / 100:g} GPUs up to this line"
            )
    start, end = _time(row, loc, "start_time"), _time(row, loc, "end_time")
    if start is not None and end is None:
        job.problem = job.problem or f"still running (task {name} started but has no end time)"
    elif start is not None and end is not None:
        if end < start:
            job.problem = job.problem or f"task {name} ends before it starts"
        job.starts.append(start)
        job.ends.append(end)
    if job.submit is None:
        job.submit = _time(row, loc, "start_time_j")
    job.user = job.user or optional_text(row.get("user"), loc, "user")
    job.group = job.group or optional_text(row.get("group"), loc, "group")


def _why_skipped(job: _Job) -> str | None:
    if job.problem is not None:
        return job.problem
    if job.gpu_percent <= 0:
        return "CPU job (no GPU planned in any task)"
    if not job.starts:
        return "never ran (no task with both a start and an end time)"
    ran = max(job.ends) - min(job.starts)
    if ran <= 0:
        return "no run time"
    if ran < MIN_WORK_S:  # as the other readers: shorter than a picosecond is nothing to simulate
        return f"ran for {ran:g} s, less than {MIN_WORK_S:g} s"
    return None


def parse(text: str, source: str, *, mix: ModelMix | None = None, seed: int = 0, **_: Any) -> Trace:
    """Jobs of a PAI task table (models drawn from ``mix``; default: the ``random`` preset)."""
    _, rows = read_csv(text, source, FORMAT, REQUIRED)
    jobs: dict[str, _Job] = {}
    for line, row in rows:
        loc = f"{source} line {line}"
        name = text_field(row["job_name"], loc, "job_name")
        _add_task(jobs.setdefault(name, _Job(line)), row, line, loc)
    kept: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for name, job in jobs.items():
        reason = _why_skipped(job)
        if reason is not None:
            skipped.append((name, f"line {job.line}: {reason}"))
            continue
        loc = f"{source} line {job.line}"
        run_s = check_seconds(
            max(job.ends) - min(job.starts), loc, f"job {name!r}: run time (latest 'end_time' minus earliest 'start_time')"
        )
        kept.append(Run(
            loc, name, _whole_gpus(job.gpu_percent), job.submit if job.submit is not None else min(job.starts), run_s,
            {"user": job.user, "group": job.group},
        ))
    return with_drawn_models(kept, FORMAT, source, skipped, mix, seed)
