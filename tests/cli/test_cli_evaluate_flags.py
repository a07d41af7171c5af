"""``evaluate``'s flags that belong to one mode only: with ``--suite`` every simulation flag is
refused (the suite file sets those), ``--workers`` only sizes a suite's pool, and an empty
``--cluster`` is no cluster."""

from __future__ import annotations

import pytest
from cli_run import cli, one_error_line

from deepshare.cli import build_parser
from deepshare.cli.evaluate import SUITE_USES

SIMULATION_FLAGS = {
    "--trace": "t.csv", "--format": "canonical", "--mix": "heavy", "--policies": "fifo+spread", "--seeds": "2",
    "--cluster": "testbed", "--nodes": "4", "--gpus-per-node": "4", "--contention": "link", "--link-params": "lp.json",
    "--true-params": "lp.json", "--perturb-contention": "0.1", "--perturb-seed": "1", "--durations": "exact",
    "--estimate-error": "0.5", "--contention-knowledge": "learned", "--history": "past.csv", "--round-s": "60",
    "--preempt-overhead-s": "1", "--migrate-overhead-s": "1",
}


def test_every_evaluate_flag_is_either_used_by_a_suite_or_refused_with_it():
    dests = set(vars(build_parser().parse_args(["evaluate"])))
    assert dests - SUITE_USES == {f[2:].replace("-", "_") for f in SIMULATION_FLAGS}


@pytest.mark.parametrize("flag", sorted(SIMULATION_FLAGS))
def test_suite_refuses_each_simulation_flag(capsys, tmp_path, flag):
    out, json_path = tmp_path / "out", tmp_path / "s.json"
    rc, _, err = cli(capsys, "evaluate", "--suite", "tiny", flag, SIMULATION_FLAGS[flag], "--out", out, "--json", json_path)
    assert rc == 2
    one_error_line(err, f"drop {flag} (")
    assert not out.exists() and not json_path.exists()


def test_workers_without_suite_is_refused(capsys, tmp_path):
    rc, _, err = cli(capsys, "evaluate", "--trace", tmp_path / "t.csv", "--policies", "fifo+spread", "--workers", "8")
    assert rc == 2
    one_error_line(err, "--workers: only with --suite")


@pytest.mark.parametrize("command", [["evaluate", "--policies", "fifo+spread"], ["simulate", "--policy", "fifo+spread"],
                                     ["compare", "--policies", "fifo+spread"]])
def test_an_empty_cluster_is_refused(capsys, tmp_path, command):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\nj0,0,FSDP,2,600,\n")
    rc, _, err = cli(capsys, *command, "--trace", trace, "--cluster", "")
    assert rc == 2
    one_error_line(err, "--cluster ''", "expected a preset", "leave the flag out for testbed")


def test_trace_generate_refuses_an_empty_cluster_without_load(capsys, tmp_path):
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", "3", "--cluster", "", "--out", tmp_path / "g.csv")
    assert rc == 2
    one_error_line(err, "--cluster/--nodes/--gpus-per-node only size an offered --load")


@pytest.mark.parametrize("bad", ["trace", "history", "link-params", "tenants"])
def test_a_bad_input_leaves_no_out_folder(capsys, tmp_path, bad):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\nj0,0,FSDP,2,600,\n")
    missing = tmp_path / "missing.file"
    flags = {"trace": ["--trace", missing], "history": ["--trace", trace, "--history", missing],
             "link-params": ["--trace", trace, "--contention", "link", "--link-params", missing],
             "tenants": ["--trace", trace, "--tenants", missing]}[bad]
    out = tmp_path / "out"
    rc, _, err = cli(capsys, "evaluate", *flags, "--policies", "fifo+spread", "--seeds", "1", "--out", out)
    assert rc == 2
    one_error_line(err, "missing.file")
    assert not out.exists()


def test_evaluate_runs_every_seed_of_the_trace(capsys, tmp_path):
    import json

    out = tmp_path / "e.json"
    rc, _, err = cli(capsys, "evaluate", "--trace", "deepshare/data/traces/deepshare-simulate-trace0.json",
                     "--policies", "fifo+spread", "--seeds", "2", "--json", out)
    assert rc == 0, err
    assert json.loads(out.read_text())["seeds"] == [0, 1]


def test_a_suite_naming_a_module_policy_runs_with_allow_imports_and_records_it(capsys, tmp_path, monkeypatch):
    """--allow-imports goes with --suite (it was refused as a simulation flag, so no suite file
    could name a module:Class policy at all); the run's recorded command keeps it."""
    import json
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "examples"))
    monkeypatch.delitem(sys.modules, "biggest_first", raising=False)
    suite = tmp_path / "mine.yaml"
    suite.write_text("name: mine\nclusters: [[2, 8]]\nloads: [0.7]\nmixes: [heavy]\ncontention: [profiled]\nseeds: 1\n"
                     "jobs_per_node: 1\nheuristics: [fifo+packed]\nlearned: ['biggest_first:BiggestFirst']\n")
    rc, _, err = cli(capsys, "evaluate", "--suite", suite, "--json", tmp_path / "no.json")
    assert rc == 2 and "would import and run Python code" in err and not (tmp_path / "no.json").exists()
    rc, _, err = cli(capsys, "evaluate", "--suite", suite, "--allow-imports", "--json", tmp_path / "r.json")
    assert rc == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "--allow-imports" in doc["provenance"]["command"] and "biggest_first:BiggestFirst" in doc["summary"]
