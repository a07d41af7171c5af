"""Figure of autoscaled runs: nodes up / being provisioned and queued jobs over time."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from deepshare.core.autoscaling import AutoscaleReport


def write_timeline_plot(reports: Sequence[AutoscaleReport], path: str | Path) -> Path:
    """Two stacked panels sharing the time axis (hours): nodes, then queue; one colour per autoscaler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    colours = plt.get_cmap("tab10").colors
    for i, r in enumerate(reports):
        c = colours[i % 10]
        t = [p.time_s / 3600 for p in r.timeline] + [r.end_s / 3600]
        up = [p.up_nodes for p in r.timeline]
        pending = [p.pending_nodes for p in r.timeline]
        queue = [p.queued_jobs for p in r.timeline]
        top.step(t, up + up[-1:], where="post", color=c, label=f"{r.autoscaler}: up")
        top.step(t, pending + pending[-1:], where="post", color=c, linestyle=":", label=f"{r.autoscaler}: provisioning")
        bottom.step(t, queue + queue[-1:], where="post", color=c, label=r.autoscaler)
    top.set(ylabel="nodes", title="Cluster size over time")
    bottom.set(xlabel="time (hours)", ylabel="queued jobs", title="Queue over time")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
