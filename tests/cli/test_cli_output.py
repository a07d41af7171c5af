"""Where commands write: ``--json PATH|-`` everywhere, outputs never overwrite inputs, bounded flags.

Issue 15 item 7 (one meaning for ``--json``, ``--version``, JSON listings) and issue 12 items 10
(no command writes over one of its own inputs) and 11 (absurd numbers are refused at parse time,
naming the flag and the accepted range).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

import deepshare
from deepshare.cli import build_parser
from deepshare.cli.output import check_outputs
from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "oversized.csv"
AUTOSCALE_TRACE = ROOT / "deepshare" / "data" / "autoscale" / "diurnal-150.csv"
AUTOSCALE_CONFIG = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"
PROFILES = ROOT / "deepshare" / "data" / "profiles"
CLUSTER_YAML = ROOT / "cluster_yamls" / "local-onprem.yaml"


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # a file named "-" would land here


# -- --json - is standard output, --json PATH a file ----------------------------------------------------
def test_simulate_json_dash_prints_only_json_and_the_table_on_stderr(capsys, tmp_path) -> None:
    rc, out, err = cli(capsys, "simulate", "--trace", SMALL, "--policy", "las+spread", "--json", "-")
    assert rc == 0
    doc = json.loads(out)  # the whole of stdout is one JSON document
    assert doc["policy"] == "las+spread" and doc["jobs"] == 4
    assert "las+spread on oversized.csv" in " ".join(err.split())  # the table moved to stderr
    assert not (tmp_path / "-").exists()
    rc, _, _ = cli(capsys, "simulate", "--trace", SMALL, "--policy", "las+spread", "--json", tmp_path / "r.json")
    assert rc == 0 and json.loads((tmp_path / "r.json").read_text()) == doc


def test_compare_and_trace_stats_json_dash(capsys, tmp_path) -> None:
    rc, out, err = cli(capsys, "compare", "--trace", SMALL, "--policies", "las+spread,fifo+consolidated", "--json", "-")
    assert rc == 0 and set(json.loads(out)["results"]) == {"las+spread", "fifo+consolidated"}
    rc, out, err = cli(capsys, "trace", "stats", BUNDLED, "--json", "-")
    assert (rc, err) == (0, "")
    assert json.loads(out)["jobs"] == 256
    rc, out, err = cli(capsys, "trace", "stats", BUNDLED, "--json", tmp_path / "s.json")
    assert rc == 0 and "256" in out  # a file: the human summary still prints
    assert json.loads((tmp_path / "s.json").read_text())["format"] == "artifact"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_policies_clusters_and_validate_have_json(capsys, tmp_path) -> None:
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    by_name = {p["name"]: p for p in json.loads(out)}
    assert by_name["las+consolidated"]["heuristic"] is True and by_name["las+consolidated"]["takes_argument"] is False
    assert by_name["rl-hybrid"]["heuristic"] is False and by_name["rl-hybrid"]["takes_argument"] is True
    rc, out, err = cli(capsys, "clusters", "--json", "-")
    assert (rc, err) == (0, "")
    testbed = next(c for c in json.loads(out) if c["name"] == "testbed")
    assert (testbed["nodes"], testbed["gpus"]) == (4, 32)
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_name: x\n")
    rc, out, err = cli(capsys, "cluster", "validate", CLUSTER_YAML, bad, "--json", "-")
    assert rc == 2
    doc = json.loads(out)
    assert [d["ok"] for d in doc] == [True, False]
    assert doc[0]["file"] == str(CLUSTER_YAML) and "bad.yaml" in doc[1]["error"]
    assert err.count("deepshare: error:") == 1 and "OK " in err  # human lines on stderr, not in the JSON


def test_every_json_flag_takes_a_path_or_dash_and_says_so() -> None:
    """No subcommand treats --json as a switch; every --json help names '-' and the overwrite rule."""
    seen = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif "--json" in action.option_strings:
                seen.append(path)
                assert action.nargs is None and action.metavar == "PATH|-", path
                assert "- for standard output" in action.help and "replaced" in action.help, path

    walk(build_parser(), "deepshare")
    expected = {"simulate", "compare", "evaluate", "calibrate", "policies", "clusters", "trace stats", "cluster validate",
                "autoscale simulate", "autoscale compare", "autoscale live", "submit", "jobs", "agents probe", "agents status"}
    assert {p.removeprefix("deepshare ") for p in seen} >= expected


def test_version(capsys) -> None:
    rc, out, _ = cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"deepshare {deepshare.__version__}"


# -- no command writes over one of its own inputs ---------------------------------------------------
def _copy(tmp: Path, source: Path, name: str | None = None) -> Path:
    target = tmp / (name or source.name)
    shutil.copyfile(source, target)
    return target


def _cases(tmp: Path) -> list[tuple[list[object], Path, list[str]]]:
    """(argv, the input that must survive, needles of the error line)."""
    trace = _copy(tmp, SMALL, "t.csv")
    yaml_cluster = tmp / "c.yaml"
    yaml_cluster.write_text("nodes:\n  - {type: x, count: 1}\n")
    config = _copy(tmp, AUTOSCALE_CONFIG)
    big = _copy(tmp, AUTOSCALE_TRACE)
    prof = tmp / "prof"
    prof.mkdir()
    for name in ("isolated_thp.csv", "shared_thp_ratio.csv"):
        _copy(prof, PROFILES / name)
    ckpt = tmp / "policy.pt"
    ckpt.write_bytes(b"not read: the check comes first")
    spec_in = _copy(tmp, CLUSTER_YAML)
    train_config = _copy(tmp, ROOT / "rllib_configs" / "rl_base.yaml", "metrics.csv")
    suite = _copy(tmp, ROOT / "deepshare" / "data" / "suites" / "tiny.yaml")
    sim = ["simulate", "--trace", trace, "--policy", "las+spread"]
    return [
        ([*sim, "--json", trace], trace, ["--json", "is the input --trace"]),
        ([*sim, "--json", f"{tmp}/./t.csv"], trace, ["--json", "--trace"]),
        ([*sim, "--jobs-csv", trace], trace, ["--jobs-csv", "--trace"]),
        ([*sim, "--json", yaml_cluster, "--cluster", yaml_cluster], yaml_cluster, ["--json", "--cluster"]),
        (["simulate", "--trace", trace, "--policy", f"rl-base={ckpt}", "--json", ckpt], ckpt, ["--json", "--policy"]),
        ([*sim, "--json", tmp / "same.json", "--jobs-csv", tmp / "same.json"], trace, ["--jobs-csv", "also the output --json"]),
        (["compare", "--trace", trace, "--policies", "las+spread", "--json", trace], trace, ["--json", "--trace"]),
        (["evaluate", "--trace", tmp / "jct_cdf.png", "--policies", "las+spread", "--out", tmp], None, ["--out", "--trace"]),
        (["trace", "generate", "--jobs", 5, "--load", 1, "--cluster", yaml_cluster, "--out", yaml_cluster], yaml_cluster,
         ["--out", "--cluster"]),
        (["trace", "stats", trace, "--json", trace], trace, ["--json", "TRACE"]),
        (["calibrate", "--profiles", prof, "--out", prof / "isolated_thp.csv"], prof / "isolated_thp.csv", ["--out", "--profiles"]),
        (["autoscale", "simulate", "--trace", big, "--config", config, "--json", config], config, ["--json", "--config"]),
        (["autoscale", "compare", "--trace", big, "--config", config, "--plot", big], big, ["--plot", "--trace"]),
        (["cluster", "spec", spec_in, "--out", spec_in], spec_in, ["--out", "FILE"]),
        (["cluster", "validate", spec_in, "--json", spec_in], spec_in, ["--json", "FILE"]),
        (["train", train_config, "--out", tmp], train_config, ["--out", "metrics.csv", "CONFIG"]),
        (["evaluate", "--suite", suite, "--json", suite], suite, ["--json", "--suite"]),
    ]


@pytest.mark.slow  # many CLI runs
def test_outputs_never_overwrite_inputs(capsys, tmp_path) -> None:
    (tmp_path / "jct_cdf.png").write_bytes(_copy(tmp_path, SMALL).read_bytes())
    for argv, keep, needles in _cases(tmp_path):
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        rc, out, err = cli(capsys, *argv)
        assert rc == 2, (argv, err)
        assert out == ""
        one_error_line(err, *needles)
        after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert after == before, argv  # nothing written, nothing changed


def test_links_to_an_input_are_the_input(capsys, tmp_path) -> None:
    trace = _copy(tmp_path, SMALL, "t.csv")
    (tmp_path / "sym.csv").symlink_to(trace)
    os.link(trace, tmp_path / "hard.csv")
    for alias in ("sym.csv", "hard.csv"):
        rc, _, err = cli(capsys, "simulate", "--trace", trace, "--policy", "las+spread", "--json", tmp_path / alias)
        assert rc == 2
        one_error_line(err, "--json", alias, "--trace")
    assert trace.read_bytes() == SMALL.read_bytes()


def test_an_output_named_like_a_missing_input_is_refused_not_created(capsys, tmp_path) -> None:
    """``cluster validate`` reports a missing file as failed and still writes its report: with
    ``--json`` naming that same missing file it used to create a JSON file under the YAML's name."""
    missing = tmp_path / "aws-gpu.yaml"
    for argv, flag in ((["cluster", "validate", "--json", missing, missing], "FILE"),
                       (["simulate", "--trace", missing, "--policy", "las+spread", "--json", missing], "--trace")):
        rc, out, err = cli(capsys, *argv)
        assert (rc, out) == (2, "")
        one_error_line(err, f"--json {missing}: is the input {flag} {missing}")
        assert not missing.exists()


def test_an_existing_output_is_replaced_as_documented(capsys, tmp_path) -> None:
    (tmp_path / "r.json").write_text("old\n")
    assert cli(capsys, "simulate", "--trace", SMALL, "--policy", "las+spread", "--json", tmp_path / "r.json")[0] == 0
    assert json.loads((tmp_path / "r.json").read_text())["jobs"] == 4


def test_dash_is_standard_output_only_for_json(capsys, tmp_path) -> None:
    for argv in (["trace", "generate", "--jobs", 3, "--out", "-"],
                 ["simulate", "--trace", SMALL, "--policy", "las+spread", "--jobs-csv", "-"]):
        rc, out, err = cli(capsys, *argv)
        assert (rc, out) == (2, "")
        one_error_line(err, "only --json can write to standard output")
    assert list(tmp_path.iterdir()) == []


def test_check_outputs_unit() -> None:
    check_outputs({"--json": "-", "--out": None}, {"--trace": "-"})  # stdout is never a file
    with pytest.raises(DeepShareError, match=r"^--json /nonexistent/x.json: folder '/nonexistent' does not exist$"):
        check_outputs({"--json": "/nonexistent/x.json"}, {})
    check_outputs({"--out": "/nonexistent/a.png"}, {}, new_folders=["/nonexistent"])  # a folder the command makes


# -- absurd numbers are refused at parse time, naming the flag and the range ---------------------------
SIM = ["simulate", "--trace", BUNDLED, "--policy", "las+spread"]
GEN = ["trace", "generate", "--jobs", 5, "--out", "t.csv"]
BOUNDS = [
    (SIM + ["--round-s", "1e308"], "--round-s", "from 1 to 10,000,000 seconds"),
    (SIM + ["--round-s", "1e-300"], "--round-s", "from 1 to 10,000,000 seconds"),
    (SIM + ["--preempt-overhead-s", "1e308"], "--preempt-overhead-s", "from 0 to 1,000,000 seconds"),
    (SIM + ["--migrate-overhead-s", "inf"], "--migrate-overhead-s", "from 0 to 1,000,000 seconds"),
    (SIM + ["--nodes", 10**8], "--nodes", "from 1 to 65,536 nodes"),
    (SIM + ["--nodes", 2, "--gpus-per-node", 10**6], "--gpus-per-node", "from 1 to 1,024 GPUs"),
    (SIM + ["--seed", 2**64], "--seed", "from 0 to"),
    (["trace", "generate", "--jobs", 10**9, "--out", "t.csv"], "--jobs", "from 1 to 10,000,000 jobs"),
    (GEN + ["--rate", "1e-300"], "--rate", "from 1e-09 to 1,000,000 jobs/s"),
    (GEN + ["--load", "1e308"], "--load", "from 0.01 to 100"),
    (GEN + ["--load", "1e-300"], "--load", "from 0.01 to 100"),
    (GEN + ["--median-duration-s", "1e308"], "--median-duration-s", "from 1 to 31,536,000 seconds"),
    (GEN + ["--duration-sigma", "1000"], "--duration-sigma", "from 0 to 5"),
    (["evaluate", "--trace", BUNDLED, "--policies", "las+spread", "--seeds", 10**6], "--seeds", "from 1 to 1,000 seeds"),
    (["calibrate", "--profiles", PROFILES, "--folds", 1], "--folds", "from 2 to 100 folds"),
    (["calibrate", "--profiles", PROFILES, "--starts", 10**6], "--starts", "from 1 to 100 starts"),
    (["calibrate", "--profiles", PROFILES, "--workers", 10**6], "--workers", "from 1 to 256 processes"),
    (["train", "x.yaml", "--iterations", 10**9], "--iterations", "from 1 to 1,000,000 iterations"),
    (["train", "x.yaml", "--num-env-runners", 10**6], "--num-env-runners", "from 0 to 1,024 env runners"),
    (["cluster", "fake", "--for-s", "1e308"], "--for-s", "from 0 to 10,000,000 seconds"),
    (["cluster", "fake", "--for-s", "nan"], "--for-s", "from 0 to"),
    (["autoscale", "simulate", "--trace", AUTOSCALE_TRACE, "--config", AUTOSCALE_CONFIG, "--round-s", "1e308"],
     "--round-s", "from 1 to 10,000,000 seconds"),
]


@pytest.mark.parametrize(("argv", "flag", "span"), BOUNDS, ids=[f"{b[1]}={b[0][-1]}" for b in BOUNDS])
def test_absurd_numbers_are_one_line_naming_flag_and_range(capsys, argv, flag, span) -> None:
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert f"argument {flag}: expected" in last and span in last, last


def test_range_edges_are_accepted(capsys, tmp_path) -> None:
    rc, out, err = cli(capsys, "simulate", "--trace", SMALL, "--policy", "las+spread", "--round-s", "1e7",
                       "--preempt-overhead-s", "1e6", "--nodes", 1, "--gpus-per-node", 1024, "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["jobs"] == 4


def test_user_text_is_printed_as_typed_never_as_emoji(capsys, tmp_path) -> None:
    # rich turns ":name:" into an emoji by default: "planner=4:::soon" printed as "planner=4::🔜"
    rc, _, err = cli(capsys, "simulate", "--trace", BUNDLED, "--policy", "planner=4:::soon")
    assert rc == 2
    one_error_line(err, "planner=4:::soon")
    trace = tmp_path / "a:smile:b.json"
    shutil.copy(BUNDLED, trace)
    rc, out, _ = cli(capsys, "simulate", "--trace", trace, "--policy", "fifo+packed", "--no-progress")
    assert rc == 0 and "a:smile:b.json" in out and "😄" not in out


def test_arrivals_past_the_latest_submission_time_name_the_rate(capsys, tmp_path) -> None:
    """The error named the first job past the bound ("job 'job-00098': field 'submit_time'")."""
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 200, "--rate", 1e-9, "--out", tmp_path / "t.csv")
    assert rc == 2 and out == "" and not (tmp_path / "t.csv").exists()
    assert err.startswith("deepshare: error: rate 1e-09 jobs/s: 200 jobs arrive over ") and "job-" not in err
