"""Tables of autoscaled runs (rich): one row per autoscaler, JCT next to dollars and GPU-hours."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table

from deepshare.core.autoscaling import AutoscaleReport


def _n(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def autoscale_table(reports: Sequence[AutoscaleReport], title: str) -> Table:
    table = Table(title=title, show_header=True, header_style="bold", caption="util = busy / billed GPU-hours; "
                  "nodes = most nodes up at once", caption_justify="left")
    cols = ("autoscaler", "done", "avg JCT s", "p99 JCT s", "queue s", "slowdown", "cost $",
            "GPU-h", "idle GPU-h", "util", "up/down", "nodes")
    for col in cols:
        table.add_column(col, justify="left" if col == "autoscaler" else "right")
    for r in reports:
        m = r.metrics
        table.add_row(
            r.autoscaler, f"{m.finished}/{m.jobs}", _n(m.avg_jct_s), _n(m.p99_jct_s), _n(m.avg_queue_s),
            _n(m.avg_slowdown, ".3f"), _n(r.cost_usd, ",.2f"), _n(r.gpu_hours, ",.1f"), _n(r.idle_gpu_hours, ",.1f"),
            _n(m.gpu_util, ".3f"), f"{r.scale_ups}/{r.scale_downs}", str(r.max_nodes_up),
        )
    return table
