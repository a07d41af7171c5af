"""``deepshare trace generate --recurrence`` and the features ``deepshare trace stats`` reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.traces import Trace, write_canonical
from deepshare.core.types import JobSpec

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def test_generate_with_recurrence_then_stats(capsys, tmp_path: Path) -> None:
    out_path = tmp_path / "r.csv"
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 400, "--rate", 0.01, "--duration-sigma", 1,
                       "--recurrence", "--users", 5, "--recurring-share", 0.5, "--requested-share", 0.25,
                       "--out", out_path)
    assert (rc, err) == (0, "")
    header = out_path.read_text().splitlines()[0]
    assert header == "job_id,submit_time,model,gpus,duration_s,total_samples,user,group,requested_s"
    rc, out, err = cli(capsys, "trace", "stats", out_path, "--json", "-")
    assert (rc, err) == (0, "")
    features = json.loads(out)["features"]
    assert features["users"] <= 5 and features["user_share"] == 1.0
    assert features["recurrence_share"] == pytest.approx(0.5, abs=0.15)
    assert features["requested_share"] == pytest.approx(0.25, abs=0.1)
    rc, out, err = cli(capsys, "trace", "stats", out_path)
    assert rc == 0 and "recurrence share" in out and "requested/true median" in out


def test_same_seed_same_file(capsys, tmp_path: Path) -> None:
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        assert cli(capsys, "trace", "generate", "--jobs", 50, "--recurrence", "--seed", 9, "--out", path)[0] == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_tuning_flags_need_recurrence(capsys) -> None:
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 5, "--users", 3, "--out", "t.csv")
    assert (rc, out) == (2, "")
    one_error_line(err, "--users: recurrence model flags need --recurrence")


def test_inconsistent_parameters_are_one_line(capsys) -> None:
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 5, "--recurrence", "--run-variance-share", 0.99,
                     "--gpu-duration-corr", 0.5, "--out", "t.csv")
    assert rc == 2
    one_error_line(err, "gpu_duration_corr must be within ±sqrt(1 - run_variance_share) = ±0.1")


@pytest.mark.parametrize(
    "flag, value, span",
    [("--users", 0, "from 1 to 1,000,000 users"), ("--recurring-share", 2, "from 0 to 1"),
     ("--runs-per-group", 1, "from 2 to 1,000,000 runs"), ("--gpu-duration-corr", -3, "from -1 to 1"),
     ("--overestimate-median", 0.5, "from 1 to 1,000"), ("--overestimate-sigma", "nan", "from 0 to 5")],
)
def test_recurrence_flags_are_bounded(capsys, flag: str, value: object, span: str) -> None:
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 5, "--recurrence", flag, value, "--out", "t.csv")
    assert rc == 2 and out == ""
    assert f"argument {flag}: expected" in err and span in err


def test_stats_of_real_formats_report_their_features(capsys, tmp_path: Path) -> None:
    rc, out, err = cli(capsys, "trace", "stats", TRACES / "slurm_sacct.txt", "--json", "-")
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    assert doc["format"] == "slurm" and doc["skipped"] == 5
    assert doc["features"]["recurrence_share"] == 0.4  # train_resnet ran twice out of 5 jobs
    assert doc["features"]["estimate"]["within"]["50%"] == 0.25  # 900 s asked for 600 s
    jobs = [JobSpec("x", "MoE", 2, duration_s=10.0, user="u", group="g", requested_s=11.0)]
    path = write_canonical(Trace(tuple(jobs), "t", "t"), tmp_path / "t.csv")
    rc, out, err = cli(capsys, "trace", "stats", path)
    assert rc == 0
    assert "users          1 (100% of jobs name one; the busiest submits 100%)" in out
    assert "±10%: 100%" in out
