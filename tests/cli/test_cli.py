"""The ``deepshare`` command as a user sees it: exit codes, printed output, written files.

Most cases call :func:`deepshare.cli.main` in-process (fast); a few start the real entry points
(``.venv/bin/deepshare`` and ``python -m deepshare``) to prove they work and never show a
traceback or terminal escape codes when their output is not a terminal.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli

import deepshare.experiments.scenario
from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.core.metrics import REPORT_KEYS

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
TRACE_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SHIPPED_BASE_FILE = ROOT / "deepshare" / "data" / "policies" / "rl_base.pt"
DOCUMENTED_EXTRAS = ("avg_service_jct_s", "decisions", "events")
PRESETS = ("testbed", "a100-16", "mixed-32", "h100-64")
# Variables that make rich treat a pipe as a terminal, force colours or fix the width.
_CONSOLE_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES", "JUPYTER_COLUMNS")


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CONSOLE_ENV:
        monkeypatch.delenv(name, raising=False)



def simulate_args(*extra: object, trace: object = BUNDLED, policy: str = "las+consolidated") -> list[object]:
    return ["simulate", "--trace", trace, "--policy", policy, *extra]


def assert_report(doc: dict, jobs: int) -> None:
    missing = set(REPORT_KEYS) - set(doc)
    assert not missing, f"report lacks {sorted(missing)}"
    assert set(DOCUMENTED_EXTRAS) <= set(doc)
    assert doc["jobs"] == jobs
    for key in ("jobs", "finished", "rejected", "preemptions", "migrations", "decisions", "events"):
        assert isinstance(doc[key], int) and doc[key] >= 0, key
    assert doc["finished"] + doc["rejected"] == jobs
    assert 0.0 < doc["gpu_util"] <= 1.0 + 1e-9
    assert doc["makespan_s"] > 0


def assert_one_error_line(err: str, *needles: str) -> str:
    """stderr is exactly one 'deepshare: error: ...' line containing every needle, no traceback."""
    assert "Traceback" not in err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    line = lines[0]
    assert line.startswith("deepshare: error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


# -- simulate ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The README's first command, run once for the tests that read its outputs (capsys is per test)."""
    folder = tmp_path_factory.mktemp("bundled")
    report, jobs_csv = folder / "report.json", folder / "jobs.csv"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in simulate_args("--json", report, "--jobs-csv", jobs_csv)])
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue(), "report": report, "jobs_csv": jobs_csv, "folder": folder}


def test_simulate_bundled_trace_writes_report_json(bundled_run: dict) -> None:
    assert bundled_run["rc"] == 0
    assert bundled_run["err"] == ""
    doc = json.loads(bundled_run["report"].read_text())
    assert_report(doc, 256)
    assert doc["finished"] == 256 and doc["rejected"] == 0
    assert doc["policy"] == "las+consolidated"
    assert doc["p50_jct_s"] <= doc["p95_jct_s"] <= doc["p99_jct_s"]
    assert doc["avg_jct_s"] >= doc["avg_queue_s"] >= 0


def test_simulate_bundled_trace_writes_jobs_csv(bundled_run: dict) -> None:
    with bundled_run["jobs_csv"].open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames
        rows = list(reader)
    assert header is not None and {"job_id", "model", "gpus", "submit_s", "finish_s", "jct_s", "rejected"} <= set(header)
    assert len(rows) == 256
    assert len({r["job_id"] for r in rows}) == 256
    doc = json.loads(bundled_run["report"].read_text())
    mean_jct = sum(float(r["jct_s"]) for r in rows) / len(rows)
    assert mean_jct == pytest.approx(doc["avg_jct_s"], rel=1e-9)


def test_simulate_prints_a_table_naming_policy_trace_and_cluster(bundled_run: dict) -> None:
    out = " ".join(bundled_run["out"].split())  # the table title may wrap
    assert "las+consolidated" in out
    assert BUNDLED.name in out
    assert "testbed" in out and "32 GPUs" in out
    assert "256 (256 / 0)" in out  # jobs (finished / rejected)


@pytest.mark.parametrize(
    ("extra", "described"),
    [
        (["--nodes", 2, "--gpus-per-node", 4], "2 nodes, 8 GPUs"),
        (["--nodes", 3], "3 nodes, 24 GPUs"),
        (["--cluster", "a100-16"], "a100-16: 16 nodes, 128 GPUs"),
        (["--cluster", FIXTURES / "small-cluster.yaml"], "tiny-lab: 2 nodes, 8 GPUs"),
        (["--round-s", 300], "testbed: 4 nodes, 32 GPUs"),
        (["--policy", "srtf+contention-aware+preempt", "--preempt-overhead-s", 0], "testbed"),
    ],
    ids=["nodes-gpus", "nodes", "preset", "yaml", "round-s", "preempt"],
)
def test_simulate_cluster_and_sim_options(capsys, tmp_path, extra, described) -> None:
    report = tmp_path / "r.json"
    rc, out, err = cli(capsys, *simulate_args("--json", report, *extra))
    assert (rc, err) == (0, "")
    assert described in " ".join(out.split())  # the table title may wrap
    doc = json.loads(report.read_text())
    assert_report(doc, 256)
    assert doc["finished"] == 256  # no bundled job needs more than 8 GPUs


def test_round_s_adds_decision_points(capsys, tmp_path) -> None:
    plain, rounds = tmp_path / "plain.json", tmp_path / "rounds.json"
    assert cli(capsys, *simulate_args("--json", plain))[0] == 0
    assert cli(capsys, *simulate_args("--json", rounds, "--round-s", 300))[0] == 0
    assert json.loads(rounds.read_text())["decisions"] > json.loads(plain.read_text())["decisions"]


def test_contention_none_has_no_slowdown(capsys, tmp_path) -> None:
    report = tmp_path / "r.json"
    rc, _, err = cli(capsys, *simulate_args("--contention", "none", "--json", report, policy="las+spread"))
    assert (rc, err) == (0, "")
    doc = json.loads(report.read_text())
    assert doc["avg_slowdown"] == pytest.approx(1.0, abs=1e-12)
    # ... while the measured model does slow the spread placement down
    assert cli(capsys, *simulate_args("--json", report, policy="las+spread"))[0] == 0
    assert json.loads(report.read_text())["avg_slowdown"] > 1.0


def test_same_arguments_give_byte_identical_outputs(capsys, tmp_path) -> None:
    outputs = []
    for run in ("a", "b"):
        folder = tmp_path / run
        folder.mkdir()
        rc, _, _ = cli(capsys, *simulate_args("--json", folder / "r.json", "--jobs-csv", folder / "j.csv",
                                              "--round-s", 300, policy="srtf+contention-aware+preempt"))
        assert rc == 0
        outputs.append(((folder / "r.json").read_bytes(), (folder / "j.csv").read_bytes()))
    assert outputs[0] == outputs[1]


def test_job_larger_than_cluster_is_rejected_not_an_error(capsys, tmp_path) -> None:
    report = tmp_path / "r.json"
    rc, out, err = cli(capsys, *simulate_args("--json", report, trace=FIXTURES / "oversized.csv"))
    assert rc == 0
    assert "Traceback" not in err
    doc = json.loads(report.read_text())
    assert_report(doc, 4)
    assert doc["rejected"] == 1
    assert doc["finished"] == 3
    assert "4 (3 / 1)" in out


def test_skipped_jobs_are_reported_on_stderr_as_one_line(capsys) -> None:
    rc, out, err = cli(capsys, *simulate_args(trace=TRACE_FIXTURES / "helios.csv"))
    assert rc == 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "skipped" in lines[0] and "h2" in lines[0]


def test_user_text_is_never_read_as_rich_markup(capsys, tmp_path) -> None:
    # A job id that looks like a closing markup tag once crashed the skipped-jobs warning.
    helios = tmp_path / "helios.csv"
    helios.write_text((TRACE_FIXTURES / "helios.csv").read_text().replace("\nh2,", "\n[/x],"))
    rc, _, err = cli(capsys, *simulate_args(trace=helios))
    assert rc == 0 and "Traceback" not in err
    assert "[/x]" in err
    # Square brackets in file names are printed as they are, not swallowed as styles.
    trace = tmp_path / "trace[v2].csv"
    shutil.copy(FIXTURES / "oversized.csv", trace)
    rc, out, _ = cli(capsys, *simulate_args(trace=trace))
    assert rc == 0 and "trace[v2].csv" in out
    rc, out, _ = cli(capsys, "trace", "stats", trace)
    assert rc == 0 and "trace[v2].csv" in out
    rc, out, _ = cli(capsys, "compare", "--trace", trace, "--policies", "las+spread")
    assert rc == 0 and "trace[v2].csv" in out


# -- compare ----------------------------------------------------------------------------------
def test_compare_writes_results_per_policy(capsys, tmp_path) -> None:
    path = tmp_path / "cmp.json"
    rc, out, err = cli(capsys, "compare", "--trace", BUNDLED, "--policies", "las+spread, srtf+spread", "--json", path)
    assert (rc, err) == (0, "")
    doc = json.loads(path.read_text())
    assert set(doc) == {"results", "information"}  # what the policies knew: tests/cli/test_cli_information_json.py
    assert set(doc["results"]) == {"las+spread", "srtf+spread"}
    for name, report in doc["results"].items():
        assert_report(report, 256)
        assert report["policy"] == name
        assert name in out
    assert "256 jobs" in out


def test_compare_agrees_with_simulate(capsys, tmp_path) -> None:
    cmp_path, sim_path = tmp_path / "cmp.json", tmp_path / "sim.json"
    assert cli(capsys, "compare", "--trace", BUNDLED, "--policies", "srtf+spread", "--json", cmp_path)[0] == 0
    assert cli(capsys, *simulate_args("--json", sim_path, policy="srtf+spread"))[0] == 0
    compared, simulated = json.loads(cmp_path.read_text()), json.loads(sim_path.read_text())
    assert compared["results"]["srtf+spread"] == {k: v for k, v in simulated.items() if k != "information"}
    assert compared["information"] == simulated["information"]


def test_compare_with_no_policy_names_is_an_error(capsys, tmp_path) -> None:
    path = tmp_path / "cmp.json"
    rc, out, err = cli(capsys, "compare", "--trace", BUNDLED, "--policies", ",", "--json", path)
    assert rc == 2
    assert_one_error_line(err, "--policies")
    assert not path.exists()


def test_policies_reads_a_quoted_item_holding_a_comma_whole() -> None:
    from deepshare.cli.args import policy_list

    assert policy_list('fifo+packed, "deepshare.policies.registry:make_policy=las+spread", srsf+packed') == [
        "fifo+packed", "deepshare.policies.registry:make_policy=las+spread", "srsf+packed"]
    with pytest.raises(DeepShareError, match="an item holding a comma in double quotes"):
        policy_list('fifo+packed,"rl-base')  # a quote left open


def test_compare_takes_a_policy_file_whose_path_holds_a_comma(capsys, tmp_path) -> None:
    folder = tmp_path / "a,b"
    folder.mkdir()
    shutil.copy(SHIPPED_BASE_FILE, folder / "policy.pt")
    path = tmp_path / "cmp.json"
    rc, out, err = cli(capsys, "compare", "--trace", BUNDLED, "--policies", f'fifo+packed,"rl-base={folder}/policy.pt"',
                       "--json", path)
    assert rc == 0, err
    assert set(json.loads(path.read_text())["results"]) == {"fifo+packed", "rl-base"}


# -- listings ---------------------------------------------------------------------------------
def test_policies_lists_registered_policies(capsys) -> None:
    rc, out, err = cli(capsys, "policies")
    assert (rc, err) == (0, "")
    names = {line.split("│")[1].strip() for line in out.splitlines() if line.count("│") >= 3}
    assert {"las+consolidated", "srtf+contention-aware+preempt", "dlas+spread", "fifo+spread"} <= names
    assert "fifo+spread+preempt" not in names  # fifo never preempts
    assert len(names) >= 21


def test_clusters_lists_presets(capsys) -> None:
    rc, out, err = cli(capsys, "clusters")
    assert (rc, err) == (0, "")
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(PRESETS) <= listed
    testbed = next(line for line in out.splitlines() if line.startswith("testbed"))
    assert "4 nodes, 32 GPUs" in testbed and "TITAN Xp" in testbed


# -- trace generate / stats -------------------------------------------------------------------
def test_trace_generate_stats_and_simulate(capsys, tmp_path) -> None:
    trace = tmp_path / "t.csv"
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 50, "--rate", 0.01, "--seed", 3, "--out", trace)
    assert (rc, err) == (0, "")
    assert "wrote 50 jobs" in out
    rc, out, err = cli(capsys, "trace", "stats", trace, "--json", "-")
    assert (rc, err) == (0, "")
    stats = json.loads(out)
    assert stats["format"] == "canonical"
    assert stats["jobs"] == 50 and stats["skipped"] == 0
    assert sum(stats["gpu_demand"].values()) == 50
    assert stats["arrival_rate_per_s"] == pytest.approx(0.01, rel=0.5)
    rc, out, err = cli(capsys, "trace", "stats", trace)
    assert (rc, err) == (0, "")
    assert "canonical trace" in out and "50 (0 skipped)" in out
    report = tmp_path / "r.json"
    rc, out, err = cli(capsys, *simulate_args("--json", report, trace=trace))
    assert (rc, err) == (0, "")
    assert_report(json.loads(report.read_text()), 50)


def test_trace_generate_is_deterministic_per_seed(capsys, tmp_path) -> None:
    paths = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        paths[name] = tmp_path / f"{name}.csv"
        argv = ["trace", "generate", "--jobs", 50, "--rate", 0.01, "--seed", seed, "--mix", "heavy", "--out", paths[name]]
        assert cli(capsys, *argv)[0] == 0
    assert paths["a"].read_bytes() == paths["b"].read_bytes()
    assert paths["a"].read_bytes() != paths["c"].read_bytes()


def test_trace_generate_by_load_scales_with_cluster_size(capsys, tmp_path) -> None:
    spans = {}
    for nodes in (4, 16):
        trace = tmp_path / f"load-{nodes}.csv"
        rc, _, err = cli(capsys, "trace", "generate", "--jobs", 50, "--load", 0.8, "--nodes", nodes, "--out", trace)
        assert (rc, err) == (0, "")
        rc, out, _ = cli(capsys, "trace", "stats", trace, "--json", "-")
        assert rc == 0
        stats = json.loads(out)
        assert stats["jobs"] == 50
        spans[nodes] = stats["span_s"]
    assert spans[16] < spans[4]  # the same load on 4x the GPUs means faster arrivals


def test_trace_generate_custom_demand_and_mix(capsys, tmp_path) -> None:
    trace = tmp_path / "t.csv"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 20, "--demand", "4:1", "--mix", "MoE:1", "--out", trace)
    assert (rc, err) == (0, "")
    stats = json.loads(cli(capsys, "trace", "stats", trace, "--json", "-")[1])
    assert stats["gpu_demand"] == {"4": 20}
    assert stats["models"] == {"MoE": 20}
    assert stats["arrival_rate_per_s"] is None  # neither --rate nor --load: all at t=0


# -- bad input: exit 2, one line naming the culprit, no traceback -------------------------------
def _write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


BAD_TRACES = [
    ("empty", lambda t: _write(t, "empty.json", b""), ["empty.json", "empty"]),
    ("whitespace", lambda t: _write(t, "blank.csv", b"\n  \n"), ["blank.csv", "empty"]),
    ("truncated-json", lambda t: FIXTURES / "truncated.json", ["truncated.json", "line 1", "JSON"]),
    ("binary", lambda t: _write(t, "garbage.bin", bytes(range(128, 256)) * 4), ["garbage.bin", "line 1", "UTF-8"]),
    ("nul-bytes", lambda t: _write(t, "nul.csv", b"job_id,gpus\n\x00\x00\n"), ["nul.csv", "line 2", "NUL"]),
    ("missing-columns", lambda t: FIXTURES / "missing-columns.csv", ["missing-columns.csv", "line 1", "missing required column", "'duration_s'"]),
    ("non-numeric", lambda t: FIXTURES / "non-numeric.csv", ["non-numeric.csv", "line 3", "'gpus'", "'four'"]),
    ("zero-gpus", lambda t: FIXTURES / "zero-gpus.csv", ["zero-gpus.csv", "line 2", "'gpus'", "positive integer"]),
    ("negative-gpus", lambda t: FIXTURES / "negative-gpus.json", ["negative-gpus.json", "job 'b'", "'gpu_demand'", "-2"]),
    ("not-found", lambda t: t / "nope.json", ["nope.json", "not found"]),
    ("directory", lambda t: t, ["is a directory"]),
]


@pytest.mark.parametrize(("make", "needles"), [c[1:] for c in BAD_TRACES], ids=[c[0] for c in BAD_TRACES])
def test_bad_trace_exits_2_with_one_line(capsys, tmp_path, make, needles) -> None:
    trace = make(tmp_path)
    report = tmp_path / "r.json"
    rc, out, err = cli(capsys, *simulate_args("--json", report, trace=trace))
    assert rc == 2
    assert out == ""
    assert_one_error_line(err, *needles)
    assert not report.exists()


def test_missing_columns_named_when_format_is_forced(capsys) -> None:
    rc, _, err = cli(capsys, *simulate_args("--format", "canonical", trace=FIXTURES / "missing-columns.csv"))
    assert rc == 2
    assert_one_error_line(err, "missing-columns.csv", "line 1", "'duration_s'", "canonical")


BAD_FLAGS = [
    ("unknown-policy", simulate_args(policy="las+nowhere"), ["--policy", "'las+nowhere'", "deepshare policies"]),
    ("fifo-preempt", simulate_args(policy="fifo+spread+preempt"), ["--policy", "'fifo+spread+preempt'"]),
    ("heuristic-with-arg", simulate_args(policy="las+spread=ckpt.pt"), ["--policy", "'las+spread'", "takes no argument"]),
    ("compare-unknown-policy", ["compare", "--trace", BUNDLED, "--policies", "las+spread,nope"], ["'nope'"]),
    ("unknown-preset", simulate_args("--cluster", "dgx-9000"), ["--cluster", "'dgx-9000'", "testbed"]),
    ("cluster-unknown-key", simulate_args("--cluster", FIXTURES / "cluster-unknown-key.yaml"),
     ["cluster-unknown-key.yaml", "node_types.box.nic_gbit"]),
    ("cluster-not-yaml-mapping", None, ["not-a-mapping.yaml", "mapping"]),
    ("gpus-per-node-without-nodes", simulate_args("--gpus-per-node", 4), ["--gpus-per-node", "--nodes"]),
    ("cluster-and-nodes", simulate_args("--cluster", "testbed", "--nodes", 2), ["--cluster", "--nodes"]),
    ("json-missing-folder", None, ["--json", "does not exist"]),
    ("jobs-csv-missing-folder", None, ["--jobs-csv", "does not exist"]),
    ("json-is-directory", None, ["--json", "is a directory"]),
    ("bad-mix", simulate_args("--mix", "bogus"), ["'bogus'", "mix"]),
    ("bad-mix-weight", simulate_args("--mix", "MoE:-1"), ["mix", "'MoE:-1'", "weight"]),
    ("rate-and-load", ["trace", "generate", "--jobs", 5, "--rate", 0.1, "--load", 0.5, "--out", "{tmp}/t.csv"],
     ["--rate", "--load"]),
    ("bad-demand", ["trace", "generate", "--jobs", 5, "--demand", "3:x", "--out", "{tmp}/t.csv"], ["demand", "'3:x'", "weight"]),
    ("bad-demand-gpus", ["trace", "generate", "--jobs", 5, "--demand", "zero:1", "--out", "{tmp}/t.csv"], ["demand", "'zero'"]),
    ("generate-missing-folder", ["trace", "generate", "--jobs", 5, "--out", "{tmp}/nowhere/t.csv"], ["--out", "does not exist"]),
    ("stats-missing-file", ["trace", "stats", "{tmp}/absent.csv"], ["absent.csv", "not found"]),
]


def _bad_flag_argv(case: str, argv: list | None, tmp: Path) -> list:
    if case == "cluster-not-yaml-mapping":
        spec = _write(tmp, "not-a-mapping.yaml", b"- just\n- a list\n")
        return simulate_args("--cluster", spec)
    if case == "json-missing-folder":
        return simulate_args("--json", tmp / "missing" / "r.json")
    if case == "jobs-csv-missing-folder":
        return simulate_args("--jobs-csv", tmp / "missing" / "j.csv")
    if case == "json-is-directory":
        return simulate_args("--json", tmp)
    return [str(a).replace("{tmp}", str(tmp)) for a in argv]


@pytest.mark.parametrize(("case", "argv", "needles"), BAD_FLAGS, ids=[c[0] for c in BAD_FLAGS])
def test_bad_flag_exits_2_with_one_line(capsys, monkeypatch, tmp_path, case, argv, needles) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal must not wrap the message
    rc, out, err = cli(capsys, *_bad_flag_argv(case, argv, tmp_path))
    assert rc == 2
    assert out == ""
    assert_one_error_line(err, *needles)
    assert not (tmp_path / "missing").exists()
    assert not (tmp_path / "t.csv").exists()


ARGPARSE_ERRORS = [
    ("nodes-zero", simulate_args("--nodes", 0), "argument --nodes"),
    ("nodes-negative", simulate_args("--nodes", -1), "argument --nodes"),
    ("gpus-per-node-zero", simulate_args("--nodes", 2, "--gpus-per-node", 0), "argument --gpus-per-node"),
    ("unknown-format", simulate_args("--format", "xml"), "argument --format"),
    ("unknown-contention", simulate_args("--contention", "magic"), "argument --contention"),
    ("round-s-nan", simulate_args("--round-s", "nan"), "argument --round-s"),
    ("negative-overhead", simulate_args("--preempt-overhead-s", -1), "argument --preempt-overhead-s"),
    ("negative-seed", simulate_args("--seed", -1), "argument --seed"),
    ("missing-policy", ["simulate", "--trace", BUNDLED], "--policy"),
    ("jobs-zero", ["trace", "generate", "--jobs", 0, "--out", "x.csv"], "argument --jobs"),
    # Python's int() and float() read these as 1000, 12 and 10: a flag's number is ASCII digits
    ("nodes-underscore", simulate_args("--nodes", "1_000"), "argument --nodes: expected an integer"),
    ("nodes-arabic-digits", simulate_args("--nodes", "\u0661\u0662"), "argument --nodes: expected an integer"),
    ("round-s-underscore", simulate_args("--round-s", "1_0"), "argument --round-s: expected a number"),
    ("jobs-exponent", ["trace", "generate", "--jobs", "1e3", "--out", "x.csv"], "argument --jobs: expected an integer"),
    # a range given as choices= printed all 100,000 of them in the error
    ("steps-zero", ["autoscale", "live", "--steps", 0], "argument --steps: expected an integer from 1 to 100,000 steps"),
    ("workers-nine", ["cluster", "fake", "--workers", 9], "argument --workers: expected an integer from 1 to 8"),
    ("no-command", [], "required"),
]


@pytest.mark.parametrize(("argv", "needle"), [c[1:] for c in ARGPARSE_ERRORS], ids=[c[0] for c in ARGPARSE_ERRORS])
def test_bad_flag_value_is_a_usage_error(capsys, argv, needle) -> None:
    rc, out, err = cli(capsys, *argv)
    assert rc == 2
    assert out == ""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error:" in last and needle in last
    assert len(last) < 400, last


def test_output_problems_are_found_before_simulating(capsys, monkeypatch, tmp_path) -> None:
    def must_not_run(*args, **kwargs):
        raise AssertionError("simulated before checking the output path")

    monkeypatch.setattr(deepshare.experiments.scenario, "simulate", must_not_run)
    monkeypatch.setattr(deepshare.experiments.scenario, "compare", must_not_run)
    missing = tmp_path / "missing"
    rc, out, err = cli(capsys, *simulate_args("--json", missing / "r.json"))
    assert rc == 2 and out == ""
    assert_one_error_line(err, "--json", str(missing / "r.json"))
    rc, out, err = cli(capsys, "compare", "--trace", BUNDLED, "--policies", "las+spread", "--json", missing / "c.json")
    assert rc == 2 and out == ""
    assert_one_error_line(err, "--json")
    # an unknown policy is found before the trace is even read
    rc, _, err = cli(capsys, *simulate_args(trace=tmp_path / "absent.json", policy="nope"))
    assert rc == 2
    assert_one_error_line(err, "'nope'")
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


# -- files are written atomically ---------------------------------------------------------------
def test_outputs_leave_no_temporary_files(capsys, tmp_path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "r.json").write_text("old report\n")  # replaced, not appended to
    assert cli(capsys, *simulate_args("--json", out_dir / "r.json", "--jobs-csv", out_dir / "j.csv"))[0] == 0
    assert cli(capsys, "compare", "--trace", BUNDLED, "--policies", "las+spread", "--json", out_dir / "c.json")[0] == 0
    assert cli(capsys, "trace", "generate", "--jobs", 10, "--out", out_dir / "t.csv")[0] == 0
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["c.json", "j.csv", "r.json", "t.csv"], names
    json.loads((out_dir / "r.json").read_text())


def test_outputs_respect_umask(capsys, tmp_path) -> None:
    old = os.umask(0o022)
    try:
        assert cli(capsys, *simulate_args("--json", tmp_path / "r.json", trace=FIXTURES / "oversized.csv"))[0] == 0
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


# -- no terminal: no progress bar, no escape codes ------------------------------------------------
@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough jobs (>= cli.PROGRESS_MIN_JOBS) that a terminal would get a progress bar."""
    from deepshare.cli.progress import PROGRESS_MIN_JOBS

    path = tmp_path_factory.mktemp("big") / "big.csv"
    assert main(["trace", "generate", "--jobs", str(PROGRESS_MIN_JOBS + 100), "--rate", "0.05", "--out", str(path)]) == 0
    return path


def test_no_progress_bar_when_captured(capsys, big_trace) -> None:
    capsys.readouterr()
    rc, out, err = cli(capsys, *simulate_args(trace=big_trace, policy="las+spread"))
    assert rc == 0
    assert err == ""
    assert "\x1b" not in out


# -- the real entry points -------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CONSOLE_ENV}
    env["TERM"] = "xterm-256color"  # a colour terminal type, yet output goes to pipes
    return env


def _entry_point() -> Path:
    exe = Path(sys.executable).parent / "deepshare"
    if not exe.exists():
        pytest.skip(f"no deepshare entry point next to {sys.executable}")
    return exe


def test_entry_point_simulate_on_pipes(tmp_path, big_trace) -> None:
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [str(_entry_point()), *map(str, simulate_args("--json", report, trace=big_trace, policy="las+spread"))],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar on a pipe
    assert "\x1b" not in proc.stdout
    assert "las+spread" in proc.stdout
    assert_report(json.loads(report.read_text()), 600)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_python_m_deepshare_bad_trace(tmp_path) -> None:
    bad = _write(tmp_path, "garbage.bin", bytes(range(128, 256)))
    proc = subprocess.run(
        [sys.executable, "-m", "deepshare", *map(str, simulate_args(trace=bad))],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "\x1b" not in proc.stderr
    assert_one_error_line(proc.stderr, "garbage.bin", "UTF-8")


def test_entry_point_usage_error_and_listing(tmp_path) -> None:
    proc = subprocess.run(
        [str(_entry_point()), *map(str, simulate_args("--nodes", 0))],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "argument --nodes" in proc.stderr.strip().splitlines()[-1]
    proc = subprocess.run(
        [sys.executable, "-m", "deepshare", "policies"],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    assert "\x1b" not in proc.stdout
    assert "srtf+contention-aware+preempt" in proc.stdout
