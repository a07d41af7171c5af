"""Figures of an evaluation: JCT CDF, average JCT against GPU utilisation, utilisation over time.

Readable across figures: every policy keeps one colour (and line style) in all three
(:func:`policy_styles`), is labelled by its short name (``rl-hybrid``, not the checkpoint path:
:func:`short_labels`), and the JCT-utilisation figure draws min-max error bars over seeds
(:func:`error_bars`). The pure helpers are separate from the drawing so tests can check them.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Sequence

import numpy as np

from deepshare.core.atomic import write_bytes_atomic
from deepshare.experiments.evaluation import Evaluation

PLOT_FILES = ("jct_cdf.png", "jct_vs_util.png", "util_over_time.png")
"""The files :func:`write_plots` writes (the CLI checks none of them is an input)."""

_LINE_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
"""Hollow, of different shapes: policies with equal results stay visible on top of each other."""


def short_label(name: str) -> str:
    """``rl-hybrid=runs/x/policy.pt`` -> ``rl-hybrid``; ``my_pkg.policies:BiggestFirst`` -> ``BiggestFirst``."""
    base = name.partition("=")[0]
    return base.rpartition(":")[2] if ":" in base else base


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """A short, unique label per policy: equal short names get their argument's folder name
    (``rl-hybrid (run2)``), then a counter if still equal."""
    first = {n: short_label(n) for n in names}
    labels: dict[str, str] = {}
    for name in names:
        label = first[name]
        if sum(1 for other in names if first[other] == label) > 1:
            arg = name.partition("=")[2]
            if arg:
                path = PurePath(arg)
                label = f"{label} ({path.parent.name or path.stem})"
        labels[name] = label
    counts = Counter(labels.values())
    seen: Counter[str] = Counter()
    for name in names:
        label = labels[name]
        if counts[label] > 1:
            seen[label] += 1
            labels[name] = f"{label} #{seen[label]}"
    return labels


def policy_styles(names: Sequence[str]) -> dict[str, dict[str, object]]:
    """One colour and line style per policy, the same in every figure of a run.

    Colours follow the policies' order in the run: the 10 ``tab10`` colours first (the most
    distinct), then the other 10 of ``tab20``; beyond 20 policies the line style changes.
    """
    import matplotlib

    tab10 = list(matplotlib.colormaps["tab10"].colors)
    tab20 = list(matplotlib.colormaps["tab20"].colors)
    palette = tab10 + [c for c in tab20 if c not in tab10]
    return {
        name: {"color": palette[i % len(palette)], "linestyle": _LINE_STYLES[(i // len(palette)) % len(_LINE_STYLES)]}
        for i, name in enumerate(dict.fromkeys(names))
    }


@dataclass(frozen=True)
class ErrorBar:
    """A policy's point on the JCT-utilisation figure: means, and distances to the min and max."""

    util: float
    jct_h: float
    util_err: tuple[float, float]
    """(mean - min, max - mean) of the GPU utilisation over seeds."""
    jct_err: tuple[float, float]
    """(mean - min, max - mean) of the average JCT in hours over seeds."""


def error_bars(evaluation: Evaluation) -> dict[str, ErrorBar]:
    """Min-max over seeds of utilisation and average JCT (hours), per policy with finished jobs."""
    summary = evaluation.summary()
    bars = {}
    for policy in evaluation.policies:
        util, jct = summary[policy]["gpu_util"], summary[policy]["avg_jct_s"]
        if util["mean"] is None or jct["mean"] is None:
            continue
        bars[policy] = ErrorBar(
            util=util["mean"], jct_h=jct["mean"] / 3600,
            util_err=_widths(util),
            jct_err=tuple(w / 3600 for w in _widths(jct)),  # type: ignore[arg-type]
        )
    return bars


def _widths(stat: dict[str, float | None]) -> tuple[float, float]:
    """(mean - min, max - mean), never below 0 (matplotlib refuses negative error bars)."""
    mean, lo, hi = float(stat["mean"]), float(stat["min"]), float(stat["max"])  # type: ignore[arg-type]
    return max(0.0, mean - lo), max(0.0, hi - mean)


def make_figures(evaluation: Evaluation) -> dict[str, object]:
    """The three matplotlib figures by file name (not yet saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = evaluation.policies
    styles = policy_styles(policies)
    labels = short_labels(policies)
    seeds = len({r.seed for r in evaluation.runs})
    figures: dict[str, object] = {}

    fig, ax = plt.subplots(figsize=(10, 5))
    for policy in policies:
        run = evaluation.of(policy)[0]
        jct = np.sort([r.jct_s / 3600 for r in run.report.records if r.jct_s is not None])
        ax.step(jct, np.arange(1, len(jct) + 1) / max(len(jct), 1), where="post", label=labels[policy], **styles[policy])
    ax.set(xlabel="JCT, submit to finish (hours)", ylabel="fraction of jobs", title="JCT CDF (first seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figures["jct_cdf.png"] = fig

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (policy, bar) in enumerate(error_bars(evaluation).items()):
        ax.errorbar(bar.util, bar.jct_h, xerr=np.array([bar.util_err]).T, yerr=np.array([bar.jct_err]).T,
                    fmt=_MARKERS[i % len(_MARKERS)], markersize=11 - 1.5 * (i % 4), mfc="none", mew=1.5,
                    color=styles[policy]["color"], capsize=3, label=labels[policy])
    ax.set(xlabel="GPU utilisation", ylabel="average JCT (hours)",
           title=f"Average JCT against utilisation (mean, min-max over {seeds} seed(s))")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figures["jct_vs_util.png"] = fig

    fig, ax = plt.subplots(figsize=(10, 5))
    for policy in policies:
        run = evaluation.of(policy)[0]
        t = np.array([p[0] for p in run.util_timeline]) / 3600
        busy = np.array([p[1] for p in run.util_timeline]) / run.total_gpus
        ax.step(t, busy, where="post", label=labels[policy], linewidth=0.9, **styles[policy])
    ax.set(xlabel="time (hours)", ylabel="GPU utilisation", title="Utilisation over time (first seed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figures["util_over_time.png"] = fig
    return figures


def write_plots(evaluation: Evaluation, folder: str | Path) -> list[Path]:
    """Write the three figures (:data:`PLOT_FILES`) as PNG files into ``folder``; returns their paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    return [save(fig, out / name) for name, fig in make_figures(evaluation).items()]


def save(fig, path: str | Path) -> Path:  # type: ignore[no-untyped-def]
    """Lay out and write ``fig`` as PNG through a temporary file and a rename, then free it."""
    return write_bytes_atomic(path, png_bytes(fig), "figure")


def png_bytes(fig) -> bytes:  # type: ignore[no-untyped-def]
    """Lay out ``fig``, render it as PNG and free it: the file's bytes, for a command that puts its
    figures in place with its other outputs (:class:`~deepshare.core.output_set.OutputSet`)."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=120, format="png")
    finally:
        plt.close(fig)
    return buffer.getvalue()
