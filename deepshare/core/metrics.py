"""Per-job records and the run's :class:`MetricsReport`.

Definitions (all times in seconds):

* **JCT** = finish - submit (queueing included). Percentiles use linear interpolation
  between order statistics (NumPy's default).
* **queueing** = JCT - time holding GPUs (waiting before the first start and after preemptions).
* **service JCT** = finish - first start: what the original artifact printed as "avg JCT".
* **makespan** = last finish - first submission.
* **GPU utilisation** = GPU-seconds allocated / (GPUs x makespan), time-weighted; GPUs held
  while restoring a checkpoint count as allocated. Time stretched by contention raises it: a
  policy that spreads jobs and slows them down 2x holds GPUs twice as long and looks busier.
* **useful-work utilisation** = the GPU-seconds the finished work would have needed at
  isolated speed (ratio 1, on the placements the jobs actually had: ``gpus x productive time
  x mean ratio``) / (GPUs x makespan). It discounts contention slowdown, restore overheads
  and GPUs held without progress, so it is at most ``gpu_util``; read both with the makespan.
* **contention slowdown** of a job = productive time / the time it would have taken at
  ratio 1 on the same placements (1 / time-weighted mean ratio); the report averages it over
  finished jobs.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from typing import Sequence

import numpy as np


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: str
    model: str
    gpus: int
    submit_s: float
    first_start_s: float | None
    finish_s: float | None
    gpu_time_s: float
    productive_s: float
    mean_ratio: float
    preemptions: int
    migrations: int
    rejected: bool

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s

    @property
    def queue_s(self) -> float | None:
        jct = self.jct_s
        return None if jct is None else max(0.0, jct - self.gpu_time_s / self.gpus)

    @property
    def useful_gpu_s(self) -> float:
        """GPU-seconds of progress at isolated speed: what the run would have held without contention."""
        return self.gpus * self.productive_s * self.mean_ratio

    @property
    def service_jct_s(self) -> float | None:
        if self.finish_s is None or self.first_start_s is None:
            return None
        return self.finish_s - self.first_start_s


REPORT_KEYS = (
    "jobs", "finished", "rejected", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
    "avg_queue_s", "makespan_s", "gpu_util", "useful_util", "avg_slowdown", "preemptions", "migrations",
)


@dataclass(frozen=True)
class MetricsReport:
    policy: str
    jobs: int
    finished: int
    rejected: int
    avg_jct_s: float | None
    p50_jct_s: float | None
    p95_jct_s: float | None
    p99_jct_s: float | None
    avg_queue_s: float | None
    makespan_s: float
    gpu_util: float
    avg_slowdown: float | None
    preemptions: int
    migrations: int
    avg_service_jct_s: float | None
    decisions: int
    events: int
    records: tuple[JobRecord, ...] = ()
    useful_util: float = 0.0
    """Useful-work utilisation (module docstring); after ``records`` so that positional
    construction keeps working."""

    def to_dict(self) -> dict[str, object]:
        """Every scalar metric (the ``--json`` document); per-job records are left out."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "records"}

    def jobs_csv(self) -> str:
        """The per-job table as CSV text (the ``--jobs-csv`` file)."""
        out = io.StringIO()
        names = [f.name for f in fields(JobRecord)] + ["jct_s", "queue_s", "service_jct_s"]
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        for r in self.records:
            row = asdict(r)
            row.update(jct_s=r.jct_s, queue_s=r.queue_s, service_jct_s=r.service_jct_s)
            writer.writerow(["" if row[n] is None else row[n] for n in names])
        return out.getvalue()


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def build_report(
    records: Sequence[JobRecord],
    *,
    total_gpus: int,
    busy_gpu_s: float,
    policy: str = "",
    decisions: int = 0,
    events: int = 0,
) -> MetricsReport:
    finished = [r for r in records if r.finish_s is not None]
    jcts = [r.jct_s for r in finished]  # type: ignore[misc]
    admitted = [r for r in records if not r.rejected]
    if finished:
        makespan = max(r.finish_s for r in finished) - min(r.submit_s for r in admitted)  # type: ignore[type-var]
    else:
        makespan = 0.0
    util = busy_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0
    useful = sum(r.useful_gpu_s for r in finished) / (total_gpus * makespan) if makespan > 0 else 0.0
    return MetricsReport(
        policy=policy,
        jobs=len(records),
        finished=len(finished),
        rejected=sum(r.rejected for r in records),
        avg_jct_s=_mean(jcts),
        p50_jct_s=_pct(jcts, 50),
        p95_jct_s=_pct(jcts, 95),
        p99_jct_s=_pct(jcts, 99),
        avg_queue_s=_mean([r.queue_s for r in finished]),  # type: ignore[misc]
        makespan_s=makespan,
        gpu_util=util,
        avg_slowdown=_mean([1.0 / r.mean_ratio for r in finished]),
        preemptions=sum(r.preemptions for r in records),
        migrations=sum(r.migrations for r in records),
        avg_service_jct_s=_mean([r.service_jct_s for r in finished]),  # type: ignore[misc]
        decisions=decisions,
        events=events,
        records=tuple(records),
        useful_util=useful,
    )
