"""Human-readable tables of simulation reports (rich)."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table

from deepshare.core.metrics import LARGE_GANG_GPUS, MetricsReport


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_table(report: MetricsReport, title: str) -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("jobs (finished / rejected)", f"{report.jobs} ({report.finished} / {report.rejected})"),
        ("avg JCT, submit to finish (s)", _s(report.avg_jct_s)),
        ("p50 / p95 / p99 JCT (s)", f"{_s(report.p50_jct_s)} / {_s(report.p95_jct_s)} / {_s(report.p99_jct_s)}"),
        ("avg queueing delay (s)", _s(report.avg_queue_s)),
        ("avg service JCT, original's 'JCT' (s)", _s(report.avg_service_jct_s)),
        ("makespan (s)", _s(report.makespan_s)),
        ("GPU utilisation (allocated)", _f(report.gpu_util)),
        ("useful-work utilisation (isolated speed)", _f(report.useful_util)),
        ("avg contention slowdown", _f(report.avg_slowdown)),
        ("preemptions / migrations", f"{report.preemptions} / {report.migrations}"),
        ("decision points / events", f"{report.decisions} / {report.events}"),
        *fabric_rows(report),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def fabric_rows(report: MetricsReport) -> list[tuple[str, str]]:
    """The fabric and gang rows (issue 36): fragmentation and the per-level cross-domain shares
    on a fabric of more than one level, large gangs' queueing when such jobs finished; none on a
    flat cluster without large gangs, whose table stays as it was."""
    rows = []
    if len(report.cross_domain_share) > 1:
        rows.append(("fragmentation: GPU-s a queued job fitted in, idle (share)",
                     f"{_s(report.fragmentation_gpu_s)} ({_f(report.fragmentation_share)})"))
        rows.extend((f"GPU-time share spanning > 1 {level} domain", _f(share))
                    for level, share in report.cross_domain_share)
    if report.large_gang_jobs:
        rows.append((f"jobs >= {LARGE_GANG_GPUS} GPUs: avg / p95 queueing (s)",
                     f"{_s(report.large_gang_avg_queue_s)} / {_s(report.large_gang_p95_queue_s)} "
                     f"({report.large_gang_jobs} jobs)"))
    return rows


def comparison_table(reports: Sequence[MetricsReport], title: str) -> Table:
    """One row per policy, best average JCT first; on a fabric of more than one level also the
    fragmentation share, and when jobs of at least 64 GPUs finished their p95 queueing delay."""
    table = Table(title=title, show_header=True, header_style="bold")
    fabric = any(len(r.cross_domain_share) > 1 for r in reports)
    large = any(r.large_gang_jobs for r in reports)
    extra = (["fragmentation"] if fabric else []) + ([f"p95 queue >= {LARGE_GANG_GPUS} GPUs (s)"] if large else [])
    for col in ("policy", "avg JCT (s)", "p99 JCT (s)", "avg queue (s)", "makespan (s)", "GPU util", "useful util",
                "slowdown", "preempt", *extra):
        table.add_column(col, justify="left" if col == "policy" else "right")
    ranked = sorted(reports, key=lambda r: (r.avg_jct_s is None, r.avg_jct_s or 0.0, r.policy))
    for r in ranked:
        table.add_row(
            r.policy, _s(r.avg_jct_s), _s(r.p99_jct_s), _s(r.avg_queue_s), _s(r.makespan_s),
            _f(r.gpu_util), _f(r.useful_util), _f(r.avg_slowdown), str(r.preemptions),
            *([_f(r.fragmentation_share)] if fabric else []), *([_s(r.large_gang_p95_queue_s)] if large else []),
        )
    return table
