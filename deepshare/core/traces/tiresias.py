"""Loader for Tiresias/Muri-style CSV traces.

Header ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval`` (times in
seconds; ``duration`` is the job's isolated run time). Only ``job_id``, ``num_gpu``,
``submit_time``, ``model_name`` and ``duration`` are used; other columns may be present.
Model names are kept as written (``vgg19``, ``resnet50``...): the catalog maps them to proxies.
"""

from __future__ import annotations

from typing import Any

from deepshare.core.traces.base import IdRegistry, Trace, finish, integer, make_job, read_csv, text_field, timestamp, work_seconds

FORMAT = "tiresias"
REQUIRED = ("job_id", "num_gpu", "submit_time", "model_name", "duration")


def parse(text: str, source: str, **_: Any) -> Trace:
    """Jobs of a Tiresias CSV, with ``duration_s`` = the ``duration`` column."""
    _, rows = read_csv(text, source, FORMAT, REQUIRED)
    ids = IdRegistry()
    jobs = []
    for line, row in rows:
        loc = f"{source} line {line}"
        job_id = text_field(row["job_id"], loc, "job_id")
        ids.add(job_id, loc, f"line {line}")
        jobs.append(
            make_job(
                loc,
                job_id=job_id,
                model=text_field(row["model_name"], loc, "model_name"),
                gpus=integer(row["num_gpu"], loc, "num_gpu"),
                submit_time=timestamp(row["submit_time"], loc, "submit_time"),
                duration_s=work_seconds(row["duration"], loc, "duration"),  # bounded here: an error names the file's column
            )
        )
    return finish(jobs, FORMAT, source)
