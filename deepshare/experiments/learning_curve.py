"""A training run's learning curve on a benchmark suite: the policy's ratio to the best heuristic
of each cell, per checkpoint, beside the episode return.

The episode return a PPO run logs is measured on its own training episodes, with its own reward;
what a user wants to know is whether the policy gets better *against the strongest heuristics on
traces it never trained on*. :class:`SuiteCurve` answers that at every export of a run's
``policy.pt``: the suite's heuristics run once (the first time, on every cell), then each export
runs the learned policy alone on every cell and is summarised exactly as ``deepshare evaluate
--suite`` summarises it (geometric-mean average-JCT ratio, worst cell, worst p99 ratio, cells
won, and the geometric means of its average JCT over each cell's lower bound and pooled ideal).
Rows go to ``suite_curve.csv`` in the run folder, ``curves.png`` plots both curves, and a copy of
each scored file goes to ``curve/iter_NNNN.pt``, so the best iteration can be shipped (training
itself keeps only the latest ``policy.pt``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import multiprocessing
from pathlib import Path
from typing import Callable, Sequence

from deepshare.core.atomic import write_bytes_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.files import open_append
from deepshare.experiments.suite import (
    Cell, SuiteResult, SuiteSpec, cell_bound, cells, load_suite, pooled_ideals, run_policies,
)
from deepshare.experiments.suite_spec import tenants_content

CURVE_FILE = "suite_curve.csv"
PLOT_FILE = "curves.png"
COPIES = "curve"
"""Folder of the run where each scored policy file is kept as ``iter_NNNN.pt``."""
CURVE_COLUMNS = (
    "iteration", "env_steps_lifetime", "episode_return_mean", "suite", "policy", "geomean_avg_jct_ratio",
    "worst_avg_jct_ratio", "worst_avg_cell", "worst_p99_jct_ratio", "worst_p99_cell", "cells_won", "cells",
    "failed_cells", "geomean_avg_jct_over_bound", "geomean_avg_jct_over_pooled", "policy_file", "suite_spec",
)
"""A row per scored checkpoint. ``failed_cells``: cells left out of that row's figures because a
run failed (the summary's count), so a point scored on fewer cells is told from the others;
``suite_spec``: the suite's fingerprint (:func:`suite_fingerprint`). A file begun by an older
version gains the newer columns when a row is next appended, empty in its old rows (:func:`add_columns`)."""
SUMMARY_COLUMNS = CURVE_COLUMNS[5:-2]
"""What a row takes from the suite's summary (:meth:`SuiteResult.summary`)."""
RETURN_COLUMNS = ("iteration", "episode_return_mean")
"""What :func:`plot_curves` reads of ``metrics.csv`` (:mod:`deepshare.rl.train` writes it)."""


def suite_fingerprint(spec: SuiteSpec) -> str:
    """16 hex digits of the SHA-256 of the suite as loaded: the same for a bundled name and its
    file, another for an edited file or another suite of the same name (a YAML without ``name``
    is ``suite``). Fields left at their defaults are left out, so a version that adds a suite
    field (with a default) keeps every fingerprint; ``learned`` is left out too (the curve scores
    its own policy in its place); ``tenants`` stands for the tenants file's content
    (:func:`~deepshare.experiments.suite_spec.tenants_content`), not the name or path written."""
    fields = spec.model_dump(mode="json", exclude_defaults=True, exclude={"learned"})
    if spec.tenants is not None:
        fields["tenants"] = tenants_content(spec.tenants)
    return _digest(json.dumps(fields, sort_keys=True))


def legacy_fingerprint(spec: SuiteSpec) -> str:
    """The fingerprint as the column was first written (every field with its default included,
    ``tenants`` as written): a curve begun then still continues when its suite has not changed."""
    return _digest(spec.model_dump_json())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class SuiteCurve:
    """Scores successive exports of one policy file on a suite; the heuristics run once."""

    def __init__(self, suite: str, policy_kind: str, workers: int = 1,
                 progress: Callable[[str], None] | None = None, flag: str = "--eval-suite", on_ray: bool = False) -> None:
        """``suite``: a bundled name or a suite YAML (checked here, before any run; errors name
        ``flag``); ``policy_kind``: the registry name that loads the file (``rl-base`` or ``rl-hybrid``);
        ``on_ray``: run the cells as Ray tasks on the cluster the training run joined (each
        scored file travels to the workers through the object store) instead of ``workers`` processes."""
        self.spec: SuiteSpec = load_suite(suite, flag, check_learned=False)  # score() puts the run's policy in `learned`
        self.suite = self.spec.name
        self.fingerprint = suite_fingerprint(self.spec)
        self._accepted = {self.fingerprint, legacy_fingerprint(self.spec)}  # or as first written
        self.flag = flag
        self.kind = policy_kind
        self.workers = workers
        self.on_ray = on_ray
        self.progress = progress
        self.grid: list[Cell] = cells(self.spec)
        self._heuristics: dict[Cell, dict[str, dict[str, float | None]]] | None = None
        self._bounds: dict[Cell, float | None] = {}
        self._pooled: dict[Cell, float | None] = {}
        # Spawned, not forked: the caller is a Ray driver (threads, gRPC) that a fork would copy.
        self._context = multiprocessing.get_context("spawn") if workers > 1 and not on_ray else None

    def heuristics(self) -> dict[Cell, dict[str, dict[str, float | None]]]:
        """Every heuristic of the suite on every cell (run on first use)."""
        if self._heuristics is None:
            self._say(f"suite {self.suite}: {len(self.spec.heuristics)} heuristics on {len(self.grid)} cells (once)")
            self._heuristics = run_policies(self.spec, self.grid, self.spec.heuristics, self.workers,
                                            mp_context=self._context, on_ray=self._cluster_has_room())
            self._bounds = {cell: cell_bound(self.spec, cell) for cell in self.grid}
            self._pooled = pooled_ideals(self.spec, self.grid)
        return self._heuristics

    def score(self, policy_file: str | Path) -> dict[str, object]:
        """The suite's summary (:meth:`SuiteResult.summary`) of ``KIND=policy_file``."""
        known = self.heuristics()
        name = f"{self.kind}={policy_file}"
        spec = self.spec.model_copy(update={"learned": (name,)})
        self._say(f"suite {self.suite}: {self.kind} on {len(self.grid)} cells")
        mine = run_policies(spec, self.grid, (name,), self.workers, mp_context=self._context,
                            on_ray=self._cluster_has_room())
        merged = {cell: {**known[cell], **mine[cell]} for cell in self.grid}
        result = SuiteResult(spec, merged, self._bounds, self._pooled)
        failures = result.failures()
        if failures:  # said, not dropped: the summary leaves these cells out (its failed_cells)
            cell, policy, error = failures[0]
            self._say(f"suite {self.suite}: {len(failures)} run(s) failed, left out of the summary "
                      f"(first: {policy} on {cell.label}: {error})")
        return result.summary(name)

    def record(self, run_dir: str | Path, iteration: int, row: dict[str, float] | None,
               policy_file: str | Path) -> dict[str, object]:
        """Score ``policy_file`` as it is after ``iteration``, keep a copy of it, append the row to
        ``run_dir/suite_curve.csv`` and redraw ``run_dir/curves.png``; returns the row. A curve
        scored on another suite is refused first (:meth:`check_continues`)."""
        self.check_continues(run_dir)
        copies = Path(run_dir) / COPIES
        copies.mkdir(parents=True, exist_ok=True)
        copy = write_bytes_atomic(copies / f"iter_{iteration:04d}.pt", Path(policy_file).read_bytes(), "policy copy")
        summary = self.score(copy)
        line: dict[str, object] = {
            "iteration": iteration,
            "env_steps_lifetime": (row or {}).get("env_steps_lifetime", 0),
            "episode_return_mean": (row or {}).get("episode_return_mean", ""),
            "suite": self.suite,
            "policy": self.kind,
            **{key: summary[key] for key in SUMMARY_COLUMNS},
            "policy_file": f"{COPIES}/{copy.name}",
            "suite_spec": self.fingerprint,
        }
        append_row(Path(run_dir) / CURVE_FILE, line)
        plot_curves(run_dir)
        return line

    def check_continues(self, run_dir: str | Path) -> None:
        """Refuse, in one line, to add this suite's rows to ``run_dir``'s learning curve when its
        rows were scored on another suite, or on another file of the same name (their
        ``suite_spec``, where recorded): a resumed run would draw two suites' ratios as one line,
        and a jump caused by the change of suite would look like a gain from training. Called by
        ``deepshare train`` before Ray starts, and by :meth:`record` before it scores anything."""
        path = Path(run_dir) / CURVE_FILE
        if not path.is_file() or path.is_symlink():
            return
        try:
            rows = read_rows(path)
        except (UnicodeDecodeError, csv.Error):
            raise DeepShareError(f"{path}: cannot read the learning curve: expected UTF-8 CSV "
                                 "(move the file away, or give another run folder)") from None
        for row in rows:
            suite, spec = (row.get("suite") or "").strip(), (row.get("suite_spec") or "").strip()
            if suite and suite != self.suite:
                other = f"suite {suite!r}"
            elif spec and spec not in self._accepted:
                other = (f"another suite named {suite!r} (fingerprint {spec}, now {self.fingerprint}: the suite "
                         "file or its tenants file was changed, or the suite's definition changed with this "
                         "version of deepshare, or it is another file of that name)")
            else:
                continue
            raise DeepShareError(
                f"{self.flag} {self.suite}: {path} holds this run's learning curve on {other}; one curve is "
                f"scored on one suite, or its ratios would be drawn as one line: give {self.flag} the suite it "
                f"was scored on, or move {CURVE_FILE} away to start a new curve")

    def _cluster_has_room(self) -> bool:
        """With ``on_ray``: whether a CPU of the cluster is free for the suite's tasks. A training
        run's env runners hold theirs for the whole run and may hold every one; the tasks would
        then wait forever, so the suite runs in this process instead (and says so)."""
        if not self.on_ray:
            return False
        from deepshare.experiments.ray_runs import free_cpus

        if free_cpus() >= 1:
            return True
        self._say(f"suite {self.suite}: no CPU of the Ray cluster is free (training holds them all); "
                  "scoring in this process instead")
        return False

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)


HEADER_BYTES = 65536
"""The most of a learning curve's first line read as its header."""


def append_row(path: Path, row: dict[str, object]) -> None:
    """Append ``row`` under the file's own header, or under :data:`CURVE_COLUMNS` in a new file. A
    file begun by an older version first gains the columns it lacks (:func:`add_columns`), so the
    row keeps its ``suite_spec`` and a later resume on an edited suite is refused."""
    columns: list[str] | None = None
    if path.is_file() and not path.is_symlink() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            first = fh.readline(HEADER_BYTES)
        try:
            columns = next(csv.reader([first.decode("utf-8")]), None)
        except (UnicodeDecodeError, csv.Error):
            raise DeepShareError(f"{path} line 1: cannot read the learning curve's header: expected UTF-8 CSV "
                                 "(move the file away, or give another run folder)") from None
        if columns is not None and any(c not in columns for c in CURVE_COLUMNS):
            columns = add_columns(path, columns)
    with open_append(path, "learning curve") as fh:  # never through a link planted in the run folder
        writer = csv.DictWriter(fh, fieldnames=columns or list(CURVE_COLUMNS), extrasaction="ignore")
        if columns is None:
            writer.writeheader()
        writer.writerow(row)


def add_columns(path: Path, columns: list[str]) -> list[str]:
    """Rewrite the curve at ``path`` (atomically) under ``columns`` and the :data:`CURVE_COLUMNS`
    it lacks, after them and empty in its rows; returns the new header. A file with a row longer
    than its header keeps ``columns`` as they are (its extra cells would land in the new ones)."""
    try:
        records = list(csv.reader(io.StringIO(path.read_bytes().decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error):
        raise DeepShareError(f"{path}: cannot read the learning curve: expected UTF-8 CSV "
                             "(move the file away, or give another run folder)") from None
    if not records or records[0] != columns or any(len(r) > len(columns) for r in records[1:]):
        return columns
    header = [*columns, *(c for c in CURVE_COLUMNS if c not in columns)]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for record in records[1:]:  # a blank line stays blank (a reader skips it)
        writer.writerow([*record, *[""] * (len(header) - len(record))] if record else [])
    write_bytes_atomic(path, out.getvalue().encode("utf-8"), "learning curve")
    return header


def read_rows(path: Path) -> list[dict[str, str]]:
    """A CSV's rows; [] without the file."""
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def numeric(rows: list[dict[str, str]], columns: Sequence[str]) -> list[dict[str, float]]:
    """The numeric ``columns`` of ``rows`` (rows missing one are skipped)."""
    found = []
    for raw in rows:
        try:
            found.append({c: float(raw[c]) for c in columns})
        except (KeyError, TypeError, ValueError):
            continue
    return found


RATIO_COLUMNS = ("iteration", "geomean_avg_jct_ratio", "worst_avg_jct_ratio", "worst_p99_jct_ratio")


def complete_points(rows: list[dict[str, str]]) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The curve's points split by the cells they were scored on: those over every cell (no
    failed run; a row of an older file, which did not count failures, among them) and those
    over fewer (``failed_cells`` > 0). A line through both would join figures over different
    cells, so the plot draws the second apart."""
    whole, fewer = [], []
    for row in rows:
        failed = (row.get("failed_cells") or "").strip()
        point = numeric([row], RATIO_COLUMNS if not failed or failed == "0" else RATIO_COLUMNS[:2])
        if point:
            (whole if not failed or failed == "0" else fewer).append(point[0])
    return whole, fewer


def plot_curves(run_dir: str | Path) -> Path | None:
    """``curves.png``: the episode return per iteration (``metrics.csv``) above the suite ratios
    per scored iteration (``suite_curve.csv``), 1.0 = the best heuristic of each cell, the points
    scored on fewer cells (failed runs) marked apart (:func:`complete_points`); None when neither
    file has a row."""
    folder = Path(run_dir)
    returns = numeric(read_rows(folder / "metrics.csv"), RETURN_COLUMNS)
    scored_rows = read_rows(folder / CURVE_FILE)
    ratios, partial = complete_points(scored_rows)
    if not returns and not ratios and not partial:
        return None
    last = scored_rows[-1] if scored_rows else None
    scored = f"{last.get('policy')} on suite {last.get('suite')}" if last else ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from deepshare.experiments.plots import save

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.8), sharex=True)
    top.plot([r["iteration"] for r in returns], [r["episode_return_mean"] for r in returns], marker=".")
    top.set_ylabel("episode return (mean)")
    top.set_title("training return and suite ratio to the best heuristic per cell")
    x = [r["iteration"] for r in ratios]
    for key, label, style in (("geomean_avg_jct_ratio", "average JCT, geometric mean", "-o"),
                              ("worst_avg_jct_ratio", "average JCT, worst cell", "--s"),
                              ("worst_p99_jct_ratio", "p99 JCT, worst cell", ":^")):
        bottom.plot(x, [r[key] for r in ratios], style, label=label, fillstyle="none")
    if partial:  # not joined to the others: its figures are over fewer cells
        bottom.plot([r["iteration"] for r in partial], [r["geomean_avg_jct_ratio"] for r in partial], "x",
                    color="red", label="geometric mean over fewer cells (runs failed)")
    bottom.axhline(1.0, color="grey", linewidth=0.8)
    bottom.set_ylabel("ratio to the best heuristic")
    bottom.set_xlabel("PPO iteration")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ratios or partial:
        bottom.legend(fontsize="small", title=scored, title_fontsize="small", loc="upper center",
                      bbox_to_anchor=(0.5, -0.2), ncol=3)
    return save(fig, folder / PLOT_FILE)
