"""Per-job records and the run's :class:`MetricsReport`.

Definitions (all times in seconds):

* **JCT** = finish - submit (queueing included). Percentiles use linear interpolation
  between order statistics (NumPy's default).
* **queueing** = JCT - time holding GPUs (waiting before the first start and after preemptions).
* **service JCT** = finish - first start: what the original artifact printed as "avg JCT".
* **makespan** = last finish - first admitted submission (rejected jobs count in neither).
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

Fabric and gang metrics (issue 36; every cluster has them, the table shows them on multi-level
fabrics and when jobs of at least :data:`LARGE_GANG_GPUS` GPUs finished):

* **fragmentation** = the integral over time of the GPU count of the smallest queued job, at
  every moment when that job asks for no more GPUs than are free in the whole cluster (free
  GPUs that could hold a waiting gang by their count, left idle because no domain of its
  required level, or no placement its policy accepts, holds it; equally a policy that chose to
  wait). In GPU-seconds, and as a share of the capacity over the makespan (``gpu_util``'s
  denominator). Counting only the smallest such job's GPUs makes it a lower bound on the
  stranded capacity.
* **cross-domain share** at a fabric level = the GPU-seconds held by jobs whose placement spans
  more than one domain of that level / all GPU-seconds held (``gpu_util``'s numerator). Domains
  nest, so it never rises from a level to the one above; single-node jobs never count.
* **large gangs' queueing** = the mean and p95 of the queueing delay of the finished jobs of at
  least :data:`LARGE_GANG_GPUS` GPUs, and how many there were.
"""

from __future__ import annotations

import csv
import io
from array import array
from dataclasses import asdict, dataclass, fields
from typing import Iterator, Sequence, overload

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
    placement: str = ""
    """The node names of the job's last run, joined by ``;`` (``n0;n1``); empty if it never ran."""
    domains: tuple[int, ...] = ()
    """How many domains of each fabric level (lowest first) its last placement spanned; empty if
    it never ran (or nothing recorded it: a live record)."""

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


LARGE_GANG_GPUS = 64
"""The GPU count from which a job is a large gang (its queueing delay is reported apart)."""

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
    fragmentation_gpu_s: float = 0.0
    """GPU-seconds free while the smallest queued job fitted in the free GPUs by count and
    waited: the integral of its GPU count over those times (module docstring)."""
    fragmentation_share: float = 0.0
    """``fragmentation_gpu_s`` / (GPUs x makespan), the capacity ``gpu_util`` divides by."""
    cross_domain_share: tuple[tuple[str, float], ...] = ()
    """Per fabric level, lowest first: ``(level, share of the allocated GPU-seconds held by
    placements spanning more than one domain of that level)``. In the JSON as one key per
    level, ``cross_domain_share_<level>``; empty when the report knows no fabric."""
    large_gang_jobs: int = 0
    """Finished jobs of at least :data:`LARGE_GANG_GPUS` GPUs (the two values below are theirs)."""
    large_gang_avg_queue_s: float | None = None
    """Mean queueing delay of those jobs (None when there are none)."""
    large_gang_p95_queue_s: float | None = None
    """p95 queueing delay of those jobs (None when there are none)."""

    @property
    def levels(self) -> tuple[str, ...]:
        """The fabric's level names, lowest first (empty when the report knows no fabric)."""
        return tuple(level for level, _ in self.cross_domain_share)

    def to_dict(self) -> dict[str, object]:
        """Every scalar metric (the ``--json`` document); per-job records are left out and the
        per-level cross-domain shares are flattened to ``cross_domain_share_<level>`` keys."""
        doc: dict[str, object] = {}
        for f in fields(self):
            if f.name == "cross_domain_share":
                doc.update((f"cross_domain_share_{level}", share) for level, share in self.cross_domain_share)
            elif f.name != "records":
                doc[f.name] = getattr(self, f.name)
        return doc

    def jobs_csv(self) -> str:
        """The per-job table as CSV text (the ``--jobs-csv`` file)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        columns = csv_columns(self.levels)
        writer.writerow(columns)
        for r in self.records:
            writer.writerow(csv_row(r, columns))
        return out.getvalue()


_RECORD_ONLY = ("placement", "domains")
"""JobRecord fields that are not base columns (written at the end, on multi-level fabrics only)."""

CSV_COLUMNS = [f.name for f in fields(JobRecord) if f.name not in _RECORD_ONLY] + ["jct_s", "queue_s", "service_jct_s"]
"""The ``--jobs-csv`` header of a cluster whose fabric has one level (every flat cluster)."""


def csv_columns(levels: Sequence[str] = ()) -> list[str]:
    """The ``--jobs-csv`` header for a fabric of ``levels`` (lowest first): :data:`CSV_COLUMNS`,
    then, when there is more than one level, ``placement`` (the node names of the job's last run,
    ``;``-separated) and ``domains_<level>`` for each level (how many domains of it that
    placement spanned; empty for a job that never ran)."""
    if len(levels) <= 1:
        return CSV_COLUMNS
    return [*CSV_COLUMNS, "placement", *(f"domains_{level}" for level in levels)]


def csv_row(r: JobRecord, columns: Sequence[str] = CSV_COLUMNS) -> list[object]:
    """One ``--jobs-csv`` row under the header ``columns`` (None as an empty field)."""
    row = asdict(r)
    row.update(jct_s=r.jct_s, queue_s=r.queue_s, service_jct_s=r.service_jct_s)
    out = ["" if row[n] is None else row[n] for n in columns[:len(CSV_COLUMNS)]]
    if len(columns) > len(CSV_COLUMNS):
        out.append(r.placement)
        levels = len(columns) - len(CSV_COLUMNS) - 1
        out.extend(r.domains if len(r.domains) == levels else [""] * levels)
    return out


class UtilTimeline(Sequence[tuple[float, int]]):
    """``(time, allocated GPUs)`` at every change, starting ``(0.0, 0)``: the utilisation curve.

    A sequence of tuples to its readers, stored as two flat arrays (16 bytes a point instead of
    about 110 for a list of tuples: a million-job run has two million points).
    """

    __slots__ = ("_t", "_busy")

    def __init__(self) -> None:
        self._t = array("d", [0.0])
        self._busy = array("q", [0])

    def record(self, t: float, busy: int) -> None:
        """Allocation is ``busy`` from time ``t`` on (a change at the last point's time replaces it)."""
        if self._busy[-1] != busy:
            if self._t[-1] == t:
                self._busy[-1] = busy
            else:
                self._t.append(t)
                self._busy.append(busy)

    def __len__(self) -> int:
        return len(self._t)

    @overload
    def __getitem__(self, index: int) -> tuple[float, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[float, int]]: ...

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return list(zip(self._t[index], self._busy[index]))
        return (self._t[index], self._busy[index])

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self._t, self._busy)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (UtilTimeline, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UtilTimeline({list(self)!r})"


def _mean(values: Sequence[float] | np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _pct(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """``np.percentile(values, q)`` (linear interpolation, NumPy's default), or None for no values.

    NumPy itself, not a copy: its first call imports ``numpy.ma`` (10-25 ms on the project's
    2-core machine), but ``deepshare simulate`` meets its start-up target with it (issue 14,
    ``bench/startup.py``: the whole process in <= 0.4 s wall; the bench's simulate command, best
    of 40 runs interleaved with the hand-written copy this replaced: 0.309 s vs 0.312 s wall,
    0.281 s vs 0.288 s CPU, at load average 9), so no measured target needs a copy."""
    return float(np.percentile(values, q)) if len(values) else None


class ReportColumns:
    """Every job's result as NumPy columns, by trace position (about 70 bytes a job).

    What :func:`build_report` needs, without a :class:`JobRecord` object per job: a run of a
    million jobs keeps these columns, not a million records. ``finish`` and ``first_start`` are
    NaN for jobs that did not finish / never started.
    """

    def __init__(self, n: int) -> None:
        self.submit = np.zeros(n)
        self.first_start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.gpu_time = np.zeros(n)
        self.productive = np.zeros(n)
        self.mean_ratio = np.ones(n)
        self.gpus = np.ones(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.rejected = np.zeros(n, dtype=bool)

    def __len__(self) -> int:
        return len(self.submit)

    def set(self, i: int, r: JobRecord) -> None:
        """Row ``i`` from a record."""
        self.submit[i] = r.submit_s
        self.first_start[i] = np.nan if r.first_start_s is None else r.first_start_s
        self.finish[i] = np.nan if r.finish_s is None else r.finish_s
        self.gpu_time[i] = r.gpu_time_s
        self.productive[i] = r.productive_s
        self.mean_ratio[i] = r.mean_ratio
        self.gpus[i] = r.gpus
        self.preemptions[i] = r.preemptions
        self.migrations[i] = r.migrations
        self.rejected[i] = r.rejected

    def copy(self) -> "ReportColumns":
        out = ReportColumns(0)
        out.__dict__.update({k: v.copy() for k, v in self.__dict__.items()})
        return out

    @staticmethod
    def of(records: Sequence[JobRecord]) -> "ReportColumns":
        cols = ReportColumns(len(records))
        for i, r in enumerate(records):
            cols.set(i, r)
        return cols


def build_report(
    records: Sequence[JobRecord],
    *,
    total_gpus: int,
    busy_gpu_s: float,
    policy: str = "",
    decisions: int = 0,
    events: int = 0,
    fragmentation_gpu_s: float = 0.0,
    cross_domain_gpu_s: Sequence[tuple[str, float]] = (),
) -> MetricsReport:
    """The report of ``records`` (the per-job records are kept in it)."""
    return report_from_columns(
        ReportColumns.of(records), total_gpus=total_gpus, busy_gpu_s=busy_gpu_s, policy=policy,
        decisions=decisions, events=events, records=tuple(records),
        fragmentation_gpu_s=fragmentation_gpu_s, cross_domain_gpu_s=cross_domain_gpu_s,
    )


def report_from_columns(
    cols: ReportColumns,
    *,
    total_gpus: int,
    busy_gpu_s: float,
    policy: str = "",
    decisions: int = 0,
    events: int = 0,
    records: tuple[JobRecord, ...] = (),
    fragmentation_gpu_s: float = 0.0,
    cross_domain_gpu_s: Sequence[tuple[str, float]] = (),
) -> MetricsReport:
    """The report of the jobs in ``cols``; every value as the module docstring defines it.

    ``fragmentation_gpu_s``: the fragmentation integral (the simulator's). ``cross_domain_gpu_s``:
    per fabric level, lowest first, ``(level, GPU-seconds held by placements spanning more than
    one of its domains)``; divided by ``busy_gpu_s`` into the report's shares."""
    done = ~np.isnan(cols.finish)
    finish = cols.finish[done]
    jcts = finish - cols.submit[done]
    admitted = ~cols.rejected
    makespan = float(finish.max() - cols.submit[admitted].min()) if len(finish) else 0.0
    gpus = cols.gpus[done]
    ratio = cols.mean_ratio[done]
    util = busy_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0
    # Python's sum over the values in trace order: the same float as summing the records.
    useful_gpu_s = sum((gpus * cols.productive[done] * ratio).tolist())
    useful = useful_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0
    queue = jcts - cols.gpu_time[done] / gpus
    queue = np.where(queue > 0, queue, 0.0)
    large = queue[gpus >= LARGE_GANG_GPUS]
    capacity = total_gpus * makespan
    return MetricsReport(
        policy=policy,
        jobs=len(cols),
        finished=int(done.sum()),
        rejected=int(cols.rejected.sum()),
        avg_jct_s=_mean(jcts),
        p50_jct_s=_pct(jcts, 50),
        p95_jct_s=_pct(jcts, 95),
        p99_jct_s=_pct(jcts, 99),
        avg_queue_s=_mean(queue),
        makespan_s=makespan,
        gpu_util=util,
        avg_slowdown=_mean(1.0 / ratio),
        preemptions=int(cols.preemptions.sum()),
        migrations=int(cols.migrations.sum()),
        avg_service_jct_s=_mean(finish - cols.first_start[done]),
        decisions=decisions,
        events=events,
        records=records,
        useful_util=useful,
        fragmentation_gpu_s=fragmentation_gpu_s,
        fragmentation_share=fragmentation_gpu_s / capacity if capacity > 0 else 0.0,
        cross_domain_share=tuple((level, min(1.0, gpu_s / busy_gpu_s) if busy_gpu_s > 0 else 0.0)
                                 for level, gpu_s in cross_domain_gpu_s),
        large_gang_jobs=len(large),
        large_gang_avg_queue_s=_mean(large),
        large_gang_p95_queue_s=_pct(large, 95),
    )
