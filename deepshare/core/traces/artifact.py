"""Loader for the DeepShare artifact's JSON traces.

Format: ``{"<job id>": {"model": str, "gpu_demand": int, "total_samples_to_train": float,
"arrival_time": seconds (optional, default 0)}, ...}``. Work is given in samples, so jobs keep
``total_samples``; extra keys in a job are ignored.

Optional keys, the job's features (null or absent: the trace does not say): ``user``, ``group``
(a recurring job's tag), ``vc`` (virtual cluster or team) and ``requested_s`` (the user's time
limit or estimate, a positive number of seconds).

Optional keys, the job's topology request (null or absent: not asked), read and checked as the
canonical CSV's columns are (:func:`~deepshare.core.traces.base.topology_request`):
``required_level``, ``preferred_level`` (level names), ``slice_size`` (a positive number of GPUs)
with ``slice_level``. Whether the levels exist is the cluster's to say.
"""

from __future__ import annotations

from typing import Any

from deepshare.core.traces.base import (
    FEATURES,
    Trace,
    features,
    finish,
    integer,
    is_blank,
    make_job,
    parse_json,
    require_mapping,
    samples,
    text_field,
    timestamp,
    topology_request,
)
from deepshare.core.errors import DeepShareError

FORMAT = "artifact"


def parse(text: str, source: str, *, data: Any = None, **_: Any) -> Trace:
    """Jobs of an artifact trace (``data``: the already-parsed JSON, to avoid parsing twice)."""
    if data is None:
        data = parse_json(text, source)
    if not isinstance(data, dict):
        raise DeepShareError(
            f"{source}: expected a JSON object mapping job ids to jobs (artifact format), "
            f"got a JSON {type(data).__name__}"
        )
    dup = getattr(data, "duplicate", None)
    if dup is not None:
        raise DeepShareError(f"{source} job {dup!r}: duplicate job id")
    if not data:
        raise DeepShareError(f"{source}: expected at least one job, the trace is empty")
    jobs = []
    seen: set[str] = set()
    for raw_id, entry in data.items():
        job_id = raw_id.strip()  # as every CSV reader does: 'a' and ' a' are one id
        loc = f"{source} job {raw_id!r}"
        if not job_id:
            raise DeepShareError(f"{loc}: expected a non-empty job id")
        if job_id in seen:
            raise DeepShareError(f"{loc}: duplicate job id {job_id!r} (ids are compared without surrounding spaces)")
        seen.add(job_id)
        entry = require_mapping(entry, loc, "a job")
        arrival = entry.get("arrival_time")
        jobs.append(
            make_job(
                loc,
                job_id=job_id,
                model=text_field(entry.get("model"), loc, "model"),
                gpus=integer(entry.get("gpu_demand"), loc, "gpu_demand"),
                submit_time=0.0 if is_blank(arrival) else timestamp(arrival, loc, "arrival_time"),
                total_samples=samples(entry.get("total_samples_to_train"), loc, "total_samples_to_train"),
                **features(entry, loc, {name: name for name in FEATURES}),
                topology=topology_request(entry, loc),
            )
        )
    return finish(jobs, FORMAT, source)
