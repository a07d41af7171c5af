"""Figures people can read: short labels, one colour per policy in every figure, min-max error
bars over seeds, and the autoscaling timeline by node type with the cost curve."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.experiments.autoscale_plots import cost_curve, nodes_by_type, write_timeline_plot
from deepshare.core.autoscaling.pool import Instance
from deepshare.core.topology import uniform
from deepshare.core.traces import load
from deepshare.experiments.evaluation import Evaluation, Run, evaluate
from deepshare.experiments.plots import PLOT_FILES, error_bars, make_figures, policy_styles, short_label, short_labels, write_plots

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "oversized.csv"


def test_short_labels() -> None:
    assert short_label("rl-hybrid=runs/rl_hybrid/policy.pt") == "rl-hybrid"
    assert short_label("las+contention-aware+preempt") == "las+contention-aware+preempt"
    assert short_label("my_pkg.policies:BiggestFirst") == "BiggestFirst"
    assert short_label("my_pkg.policies:make=0.9") == "make"
    names = ["rl-hybrid=runs/a/policy.pt", "rl-hybrid=runs/b/policy.pt", "rl-base", "rl-base=x/y.pt", "las+spread"]
    assert short_labels(names) == {
        "rl-hybrid=runs/a/policy.pt": "rl-hybrid (a)",
        "rl-hybrid=runs/b/policy.pt": "rl-hybrid (b)",
        "rl-base": "rl-base",
        "rl-base=x/y.pt": "rl-base (x)",
        "las+spread": "las+spread",
    }
    same_folder = ["rl-base=r/one.pt", "rl-base=r/two.pt"]
    assert short_labels(same_folder) == {"rl-base=r/one.pt": "rl-base (r) #1", "rl-base=r/two.pt": "rl-base (r) #2"}


def test_policy_colours_are_stable_and_distinct() -> None:
    names = [f"p{i}" for i in range(25)]
    first, again = policy_styles(names), policy_styles(names)
    assert first == again
    colours = [first[n]["color"] for n in names[:20]]
    assert len(set(colours)) == 20  # 20 distinct colours before any repeats
    assert {first[n]["linestyle"] for n in names[:20]} == {"-"}
    assert first["p20"]["color"] == first["p0"]["color"] and first["p20"]["linestyle"] == "--"
    # a policy's style depends on its place in the run, not on which others follow it
    assert policy_styles(names[:3]) == {n: first[n] for n in names[:3]}


def _fake_seeds(report, policy: str, jct_s: list[float], util: list[float]) -> list[Run]:
    return [Run(policy, seed, dataclasses.replace(report, avg_jct_s=j, gpu_util=u), (), 8)
            for seed, (j, u) in enumerate(zip(jct_s, util))]


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        return evaluate(lambda seed: load(str(TRACE), seed=seed), uniform(2, 8),
                        ["las+spread", "fifo+consolidated", "biggest_first:BiggestFirst"], [0])
    finally:
        sys.path.remove(str(EXAMPLES))


def test_error_bars_are_min_max_over_seeds(evaluation: Evaluation) -> None:
    report = evaluation.runs[0].report
    runs = _fake_seeds(report, "a", [3600, 7200, 10800], [0.5, 0.6, 0.9]) + _fake_seeds(report, "b", [1800], [1.0])
    bars = error_bars(Evaluation(tuple(runs)))
    assert bars["a"].jct_h == pytest.approx(2.0) and bars["a"].jct_err == pytest.approx((1.0, 1.0))
    assert bars["a"].util == pytest.approx(2 / 3)
    assert bars["a"].util_err == pytest.approx((2 / 3 - 0.5, 0.9 - 2 / 3))
    assert bars["b"].jct_err == (0.0, 0.0) and bars["b"].jct_h == 0.5


def test_every_figure_uses_the_same_colour_and_short_label_per_policy(evaluation: Evaluation) -> None:
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    styles = policy_styles(evaluation.policies)
    labels = short_labels(evaluation.policies)
    assert labels["biggest_first:BiggestFirst"] == "BiggestFirst"
    figures = make_figures(evaluation)
    try:
        assert list(figures) == list(PLOT_FILES)
        for name, fig in figures.items():
            ax = fig.axes[0]
            handles, legend = ax.get_legend_handles_labels()
            assert legend == [labels[p] for p in evaluation.policies], name
            for policy, handle in zip(evaluation.policies, handles):
                artist = handle[0] if isinstance(handle, tuple) else handle  # an errorbar's container
                colour = artist.get_color() if hasattr(artist, "get_color") else artist.lines[0].get_color()
                assert mcolors.to_rgb(colour) == pytest.approx(mcolors.to_rgb(styles[policy]["color"])), (name, policy)
        assert "min-max over 1 seed(s)" in figures["jct_vs_util.png"].axes[0].get_title()
    finally:
        for fig in figures.values():
            plt.close(fig)


def test_write_plots_writes_pngs_and_no_temporary_files(evaluation: Evaluation, tmp_path: Path) -> None:
    paths = write_plots(evaluation, tmp_path / "figs")
    assert [p.name for p in paths] == list(PLOT_FILES)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(PLOT_FILES)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


# -- autoscaling timeline --------------------------------------------------------------------------
def _report() -> SimpleNamespace:
    """Two a-nodes (one terminated at 3,900 s) and a b-node cancelled before it was ready."""
    return SimpleNamespace(
        autoscaler="demand", end_s=7200.0, cost_usd=12.5,
        instances=(
            Instance(0, "a", 4, 3.6, requested_s=0.0, ready_s=300.0, terminated_s=3900.0),
            Instance(1, "a", 4, 3.6, requested_s=600.0, ready_s=900.0),
            Instance(2, "b", 8, 36.0, requested_s=1000.0, ready_s=1300.0, terminated_s=1200.0),
        ),
        timeline=(SimpleNamespace(time_s=0.0, queued_jobs=2), SimpleNamespace(time_s=900.0, queued_jobs=0)),
    )


def test_nodes_by_type() -> None:
    series = nodes_by_type(_report())  # type: ignore[arg-type]
    assert series == {"a": ([0.0, 300.0, 900.0, 3900.0, 7200.0], [0, 1, 2, 1, 1]), "b": ([0.0, 7200.0], [0, 0])}


def test_cost_curve_ends_at_the_billed_cost() -> None:
    times, costs = cost_curve(_report())  # type: ignore[arg-type]
    assert times == [0.0, 600.0, 1000.0, 1200.0, 3900.0, 7200.0]
    # a0: 0.001 $/s from 0 to 3900; a1: 0.001 $/s from 600; b: 0.01 $/s from 1000 to 1200
    assert costs == pytest.approx([0.0, 0.6, 1.4, 3.8, 9.2, 12.5])


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60), st.booleans(), st.sampled_from([0.5, 3.6, 36.0])),
                max_size=40))
@settings(max_examples=200, deadline=None)
def test_the_cost_curve_is_the_sum_of_every_instances_billing(spans) -> None:
    # review: the curve summed every instance at every point (quadratic: 53 s of an 8,000-job
    # --plot); one sweep gives each point's cost, checked against that sum
    instances = tuple(Instance(i, "a", 4, price, requested_s=100.0 * start, ready_s=100.0 * start,
                               terminated_s=100.0 * (start + length) if ends else None)
                      for i, (start, length, ends, price) in enumerate(spans))
    report = SimpleNamespace(end_s=5000.0, instances=instances)
    times, costs = cost_curve(report)  # type: ignore[arg-type]
    for t, cost in zip(times, costs):
        assert cost == pytest.approx(sum(i.price_usd_per_hour / 3600 * i.billed_s(t) for i in instances), rel=1e-9,
                                     abs=1e-9)
    assert costs[-1] == sum(i.price_usd_per_hour / 3600 * i.billed_s(5000.0) for i in instances)


def test_timeline_plot_is_written(tmp_path: Path) -> None:
    path = write_timeline_plot([_report()], tmp_path / "timeline.png")  # type: ignore[list-item]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.png"]
