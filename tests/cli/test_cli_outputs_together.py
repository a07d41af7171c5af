"""A command's outputs are one run's: put in place together at its end, or none of them.

Each case leaves the outputs of an earlier run in place, makes the next run fail between its
outputs (a report that cannot be built or serialised, Ctrl-C, a figure that cannot be rendered)
and checks that every earlier output is still there, unchanged, with no temporary file beside
it: never a new file next to an old one that a reader would take for the same run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.figure
import pytest
from cli_run import cli

import deepshare.cli.output
import deepshare.experiments.report_format
from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
CONFIG = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"
OLD = {"report.json": '{"old": true}\n', "jobs.csv": "old,csv\n", "timeline.png": "old figure",
       "jct_cdf.png": "old figure 1", "jct_vs_util.png": "old figure 2", "util_over_time.png": "old figure 3"}


def small_trace(folder: Path) -> Path:
    path = folder / "t.csv"
    path.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                    "j0,0,FSDP,2,2506,\nj1,302,Transformer-XL,4,1645,\nj2,2015,MoE,4,2167,\nj3,3122,MoE,8,4294,\n")
    return path


def earlier_run(folder: Path, *names: str) -> dict[str, str]:
    """The outputs an earlier run left in ``folder`` (made up: only their bytes matter)."""
    for name in names:
        (folder / name).write_text(OLD[name])
    return {name: OLD[name] for name in names}


def assert_left_as_they_were(folder: Path, old: dict[str, str], *inputs: str) -> None:
    """Every earlier output unchanged and nothing else in ``folder`` (no temporary file, no backup)."""
    left = {p.name: p.read_bytes() for p in folder.iterdir() if p.name not in inputs}
    assert left == {name: text.encode() for name, text in old.items()}  # bytes: a new figure is no text


def failing(error: BaseException):  # type: ignore[no-untyped-def]
    def fail(*args: object, **kwargs: object) -> None:
        raise error
    return fail


FAILURES = {"an error": (DeepShareError("cannot build the report"), 2), "ctrl-c": (KeyboardInterrupt(), 130)}


@pytest.mark.parametrize("failure", FAILURES)
def test_simulate_failing_after_the_run_keeps_the_earlier_json_and_csv(capsys, tmp_path, monkeypatch, failure):
    error, status = FAILURES[failure]
    old = earlier_run(tmp_path, "report.json", "jobs.csv")
    monkeypatch.setattr(deepshare.experiments.report_format, "report_table", failing(error))  # after the run, before the JSON
    rc, _, _ = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+packed", "--no-progress",
                   "--json", tmp_path / "report.json", "--jobs-csv", tmp_path / "jobs.csv")
    assert rc == status
    assert_left_as_they_were(tmp_path, old, "t.csv")


@pytest.mark.parametrize("failure", FAILURES)
def test_simulate_whose_json_cannot_be_written_keeps_the_earlier_csv(capsys, tmp_path, monkeypatch, failure):
    error, status = FAILURES[failure]
    old = earlier_run(tmp_path, "report.json", "jobs.csv")
    monkeypatch.setattr(deepshare.cli.output, "dumps", failing(error))
    rc, _, _ = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+packed", "--no-progress",
                   "--json", tmp_path / "report.json", "--jobs-csv", tmp_path / "jobs.csv")
    assert rc == status
    assert_left_as_they_were(tmp_path, old, "t.csv")


def test_simulate_with_json_to_stdout_prints_nothing_when_the_csv_is_not_put_in_place(capsys, tmp_path, monkeypatch):
    import deepshare.core.output_set as output_set

    old = earlier_run(tmp_path, "jobs.csv")
    monkeypatch.setattr(output_set, "_rename_all", failing(DeepShareError("disk full")))
    rc, out, _ = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+packed", "--no-progress",
                     "--json", "-", "--jobs-csv", tmp_path / "jobs.csv")
    assert rc == 2 and out == ""  # no JSON of a run whose CSV is not there
    assert (tmp_path / "jobs.csv").read_text() == old["jobs.csv"]


def test_simulate_puts_both_outputs_in_place(capsys, tmp_path):
    earlier_run(tmp_path, "report.json", "jobs.csv")
    rc, _, err = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+packed", "--no-progress",
                     "--json", tmp_path / "report.json", "--jobs-csv", tmp_path / "jobs.csv")
    assert rc == 0, err
    assert json.loads((tmp_path / "report.json").read_text())["jobs"] == 4
    assert len((tmp_path / "jobs.csv").read_text().splitlines()) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.csv", "report.json", "t.csv"]


@pytest.mark.parametrize("failure", FAILURES)
def test_evaluate_whose_json_fails_keeps_the_earlier_figures(capsys, tmp_path, monkeypatch, failure):
    error, status = FAILURES[failure]
    runs = tmp_path / "eval"
    runs.mkdir()
    old = earlier_run(runs, "report.json", "jct_cdf.png", "jct_vs_util.png", "util_over_time.png")
    monkeypatch.setattr(deepshare.cli.output, "dumps", failing(error))  # the figures are made before the JSON
    rc, out, _ = cli(capsys, "evaluate", "--trace", small_trace(tmp_path), "--policies", "fifo+packed", "--seeds", "1",
                     "--out", runs, "--json", runs / "report.json")
    assert rc == status
    assert "wrote" not in out  # nothing announced that is not there
    assert_left_as_they_were(runs, old)


@pytest.mark.parametrize("failure", FAILURES)
def test_autoscale_whose_plot_fails_keeps_the_earlier_json(capsys, tmp_path, monkeypatch, failure):
    error, status = FAILURES[failure]
    old = earlier_run(tmp_path, "report.json", "timeline.png")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", failing(error))  # the JSON is made before the plot
    rc, _, _ = cli(capsys, "autoscale", "simulate", "--trace", small_trace(tmp_path), "--config", CONFIG,
                   "--policy", "fifo+packed", "--no-progress", "--json", tmp_path / "report.json",
                   "--plot", tmp_path / "timeline.png")
    assert rc == status
    assert_left_as_they_were(tmp_path, old, "t.csv")


SUITE = ("name: small\njobs_per_node: 2\nloads: [1.0]\nmixes: [heavy]\nclusters: [[1, 8]]\ncontention: [profiled]\n"
         "seeds: 1\ndurations: [exact]\nheuristics: [fifo+consolidated, srsf+consolidated]\ntenants: {tenants}\n")
QUEUES = ("queues:\n  - {name: default, cohort: c, nominal_gpus: 8, borrowing_limit_gpus: 8}\n"
          "  - {name: b, cohort: c, nominal_gpus: 8, borrowing_limit_gpus: 8}\n")


@pytest.mark.parametrize("failure", FAILURES)
def test_a_suite_whose_json_fails_keeps_the_earlier_pareto_plot(capsys, tmp_path, monkeypatch, failure):
    error, status = FAILURES[failure]
    (tmp_path / "t.yaml").write_text(QUEUES)
    (tmp_path / "s.yaml").write_text(SUITE.format(tenants=tmp_path / "t.yaml"))
    runs = tmp_path / "suite"
    runs.mkdir()
    old = {"pareto.png": "old figure", "s.json": '{"old": true}\n'}
    for name, text in old.items():
        (runs / name).write_text(text)
    rc, _, err = cli(capsys, "evaluate", "--suite", tmp_path / "s.yaml", "--out", runs, "--json", runs / "s.json")
    assert rc == 0, err
    assert (runs / "pareto.png").read_bytes().startswith(b"\x89PNG")  # the suite does draw one
    for name, text in old.items():
        (runs / name).write_text(text)
    monkeypatch.setattr(deepshare.cli.output, "dumps", failing(error))  # the plot is made before the JSON
    rc, _, _ = cli(capsys, "evaluate", "--suite", tmp_path / "s.yaml", "--out", runs, "--json", runs / "s.json")
    assert rc == status
    assert_left_as_they_were(runs, old)


@pytest.mark.parametrize("failure", FAILURES)
def test_calibrate_whose_out_fails_keeps_the_earlier_json(capsys, tmp_path, monkeypatch, failure):
    from deepshare.runtime.journal import Journal

    error, status = FAILURES[failure]
    Journal(tmp_path / "state").close()  # an empty journal: a fit of no runs, quick
    old = {"fit.json": '{"old": true}\n', "params.json": '{"old": "params"}\n'}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    real, calls = json.dumps, []

    def second_fails(*args: object, **kwargs: object) -> str:  # --json's text first, then --out's
        calls.append(1)
        if len(calls) == 2:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(json, "dumps", second_fails)
    rc, _, _ = cli(capsys, "calibrate", "--from-state", tmp_path / "state", "--json", tmp_path / "fit.json",
                   "--out", tmp_path / "params.json")
    monkeypatch.undo()
    assert rc == status and len(calls) == 2
    assert {name: (tmp_path / name).read_text() for name in old} == old
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".old"))]


@pytest.mark.parametrize("failure", FAILURES)
def test_export_policy_whose_card_fails_keeps_the_earlier_policy_file(capsys, tmp_path, monkeypatch, failure):
    import deepshare.core.atomic as atomic
    from deepshare.policies.checkpoint import SHIPPED

    error, status = FAILURES[failure]
    old = {"p.pt": "old weights", "p.card.yaml": "old card"}  # a card whose sha256 is the old file's
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    real = atomic.check_output_path

    def card_fails(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).endswith(".card.yaml"):  # the card is written after the policy file is checked
            raise error
        return real(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "check_output_path", card_fails)
    rc, _, _ = cli(capsys, "export-policy", ROOT / "deepshare" / "data" / "policies" / SHIPPED, "--out",
                   tmp_path / "p.pt", "--kind", "hybrid", "--teacher", "bsrsf+uncontended", "--seeds-tried", "0,1,2",
                   "--commit", "0123abc")
    assert rc == status
    assert_left_as_they_were(tmp_path, old)
