"""Trace loading, generation and statistics.

``load(path)`` reads any supported format, recognised by content (not by file extension):

=============  ================================================================
``artifact``   DeepShare artifact JSON ``{id: {model, gpu_demand, total_samples_to_train}}``
``tiresias``   Tiresias/Muri CSV ``job_id,num_gpu,submit_time,iterations,model_name,...``
``helios``     Helios ``cluster_log.csv`` (``gpu_num``, ``vc``, ...); models from a mix
``philly``     Philly ``cluster_job_log`` JSON list (``jobid``, ``attempts``); models from a mix
``pai``        Alibaba PAI 2020 task table with a header (``job_name``, ``plan_gpu``, ``inst_num``),
               optionally joined with the job and group tag tables; models from a mix
``slurm``      ``sacct --parsable2`` output (``JobID|...|AllocTRES|...``); models from a mix
``canonical``  the project's own CSV, see :mod:`deepshare.core.traces.canonical`
=============  ================================================================

Readers keep the job features their format has (``user``, ``group``, ``vc``, ``requested_s``
of :class:`~deepshare.core.types.JobSpec`); each module's docstring says which.

Every problem with an input raises :class:`~deepshare.core.errors.DeepShareError` naming the
file and the line or job and field; a number outside DeepShare's domain
(:mod:`deepshare.core.bounds`: at most 65,536 GPUs, 10^-12 s to a year of run time, 10^11 s of
clock, 10^-12 to 10^18 samples; never NaN or infinite; numbers in ASCII digits) is such a problem, refused rather than clipped. Jobs that
cannot be simulated are listed in ``Trace.skipped`` with a reason.
"""

from __future__ import annotations

import csv
import io
import os
from types import ModuleType
from typing import Any

from deepshare.core.traces import artifact, canonical, helios, pai, philly, slurm, tiresias
from deepshare.core.traces.base import Trace, parse_json, read_text
from deepshare.core.traces.canonical import write_canonical
from deepshare.core.traces.generator import generate, parse_demand, rate_for_load
from deepshare.core.traces.mixes import MIX_PRESETS, ModelMix, assign, mix_from_spec, mix_preset, parse_mix
from deepshare.core.traces.recurrence import RecurrenceModel
from deepshare.core.traces.stats import TraceStats, trace_stats
from deepshare.core.errors import DeepShareError

_LOADERS: dict[str, ModuleType] = {
    "artifact": artifact,
    "tiresias": tiresias,
    "helios": helios,
    "philly": philly,
    "pai": pai,
    "slurm": slurm,
    "canonical": canonical,
}
FORMATS: tuple[str, ...] = tuple(_LOADERS)

_TRIED = (
    "artifact (JSON object of jobs with 'gpu_demand'), "
    "philly (JSON list of jobs with 'jobid' and 'attempts'), "
    "tiresias (CSV header with 'num_gpu' and 'model_name'), "
    "helios (CSV header with 'gpu_num' and 'vc'), "
    "pai (CSV header with 'job_name', 'plan_gpu' and 'inst_num'), "
    "slurm ('|'-separated header with 'JobID' and 'AllocTRES'), "
    "canonical (CSV header with 'gpus' and 'duration_s')"
)

__all__ = [
    "FORMATS",
    "MIX_PRESETS",
    "ModelMix",
    "RecurrenceModel",
    "Trace",
    "TraceStats",
    "assign",
    "detect_format",
    "generate",
    "load",
    "mix_from_spec",
    "mix_preset",
    "parse_demand",
    "parse_mix",
    "rate_for_load",
    "trace_stats",
    "write_canonical",
]


def _keys(obj: Any) -> str:
    return ", ".join(repr(k) for k in list(obj)[:12]) if isinstance(obj, dict) else f"a JSON {type(obj).__name__}"


def _sniff(text: str, source: str) -> tuple[str, Any]:
    """(format name, parsed JSON or None) of a trace's text."""
    if text.lstrip()[:1] in ("{", "["):
        data = parse_json(text, source)
        if isinstance(data, dict):
            first = next(iter(data.values()), None)
            if isinstance(first, dict) and "gpu_demand" in first:
                return "artifact", data
            seen = f"a JSON object; its first entry has keys: {_keys(first)}" if data else "an empty JSON object"
        elif isinstance(data, list):
            first = data[0] if data else None
            if isinstance(first, dict) and ("jobid" in first or "attempts" in first):
                return "philly", data
            seen = f"a JSON list; its first entry has keys: {_keys(first)}" if data else "an empty JSON list"
        else:
            seen = f"a JSON {type(data).__name__}"
    else:
        first_line = next((line for line in text.splitlines() if line.strip()), "")
        if {"JobID", "AllocTRES"} <= {cell.strip() for cell in first_line.split("|")}:
            return "slurm", None
        try:
            header = {cell.strip() for cell in next(csv.reader(io.StringIO(first_line)), [])}
        except csv.Error:
            header = set()
        if {"num_gpu", "model_name"} <= header:
            return "tiresias", None
        if {"gpu_num", "vc"} <= header:
            return "helios", None
        if {"job_name", "plan_gpu", "inst_num"} <= header:
            return "pai", None
        if {"gpus", "duration_s"} <= header or {"gpus", "total_samples"} <= header or {"job_id", "gpus", "model"} <= header:
            return "canonical", None  # the canonical loader then names any missing column
        shown = first_line if len(first_line) <= 200 else first_line[:197] + "..."
        seen = f"first line {shown!r}"
    raise DeepShareError(f"{source}: unrecognised trace format; tried {_TRIED}; saw {seen}")


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of the trace at ``path``, judged by its content (one of :data:`FORMATS`)."""
    return _sniff(read_text(path), str(path))[0]


def load(
    path: str | os.PathLike[str],
    format: str | None = None,
    mix: ModelMix | None = None,
    seed: int = 0,
    allow_empty: bool = False,
) -> Trace:
    """Load the trace at ``path``, detecting its format unless ``format`` forces one.

    ``mix`` and ``seed`` only matter for formats without model names (Helios, Philly, PAI,
    Slurm): models
    are drawn from ``mix`` (default: the ``random`` preset) with ``numpy.random.default_rng(seed)``.
    A trace without a job to simulate (a header alone, every job skipped) is an error unless
    ``allow_empty`` (``trace stats`` shows what was skipped): a run on it would report nothing
    and succeed.
    """
    if format is not None and format not in _LOADERS:
        raise DeepShareError(f"unknown trace format {format!r}; valid formats are: {', '.join(FORMATS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DeepShareError(f"seed must be a non-negative integer, got {seed!r}")
    source = str(path)
    text = read_text(path)
    data = None
    if format is None:
        format, data = _sniff(text, source)
    trace = _LOADERS[format].parse(text, source, data=data, mix=mix, seed=seed)
    if not trace.jobs and not allow_empty:
        why = "it has no job rows" if not trace.skipped else (
            f"all {len(trace.skipped)} of its jobs were skipped (the first, {trace.skipped[0][0]}: {trace.skipped[0][1]})")
        raise DeepShareError(f"{source}: no job to simulate: {why}")
    return trace
