"""Names that look like rich markup (``[/x]``, ``[bold]``) are printed as typed: a suite, a
cluster, a node type or a path named so was a MarkupError traceback, for a suite after all its
runs (its JSON never written)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_run import cli

SUITE = """name: "[/x]"
jobs_per_node: 2
loads: [0.7]
mixes: [heavy]
clusters: [[2, 8]]
contention: [none]
seeds: 1
heuristics: [las+consolidated, srsf+packed]
challengers: [srsf+packed]
"""


def small_trace(capsys, folder: Path) -> Path:
    trace = folder / "[b]t[i].csv"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 10, "--load", 0.9, "--nodes", 2, "--seed", 1, "--out", trace)
    assert rc == 0, err
    return trace


def test_a_suite_named_like_a_closing_tag_runs_and_writes_its_json(capsys, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    rc, out, err = cli(capsys, "evaluate", "--suite", suite, "--workers", 1, "--json", tmp_path / "s.json", "--no-progress")
    assert rc == 0, err
    assert "Traceback" not in err and "[/x]" in out
    assert json.loads((tmp_path / "s.json").read_text())["suite"]["name"] == "[/x]"


def test_an_autoscale_config_with_markup_names_prints_them(capsys, tmp_path):
    config = tmp_path / "a.yaml"
    config.write_text('name: "[/x]"\nnode_types:\n  "[/t]": {gpus: 8, price_usd_per_hour: 1, max_nodes: 4}\n')
    rc, out, err = cli(capsys, "autoscale", "simulate", "--trace", small_trace(capsys, tmp_path), "--config", config,
                       "--autoscaler", "fixed")
    assert rc == 0, err
    assert "Traceback" not in err and "[/x]" in out


def test_a_trace_path_with_brackets_is_printed_as_typed(capsys, tmp_path):
    trace = small_trace(capsys, tmp_path)
    rc, out, err = cli(capsys, "compare", "--trace", trace, "--policies", "las+consolidated,srsf+packed", "--nodes", 2)
    assert rc == 0, err
    assert "[b]t[i].csv" in out and "\\[" not in out



def test_terminal_escapes_in_a_traces_names_are_printed_escaped(capsys, tmp_path):
    """A model name holding ESC (clear the screen) printed raw in `trace stats`: every line it
    prints is one line, escapes written out. A name holding a line break (which forged a second
    line) is refused when the trace is read, the error one line with the name escaped."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                     'j1,0,"\x1b[2JEvil OK: forged",4,3600,\n')
    rc, out, err = cli(capsys, "trace", "stats", trace)
    assert rc == 0, err
    assert "\x1b" not in out and "\\x1b[2JEvil OK: forged: 1" in out
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                     'j1,0,"\x1b[2JEvil\nOK: forged",4,3600,\n')
    rc, out, err = cli(capsys, "trace", "stats", trace)
    assert rc == 2 and out == "" and "\x1b" not in err and len(err.strip().splitlines()) == 1, err
    assert "line 2: field 'model': expected a name on one line" in err


def test_terminal_escapes_in_a_cluster_yamls_names_are_printed_escaped(capsys, tmp_path):
    """`cluster validate` printed a node type's name as it was, on its OK line and in its errors:
    a name with a newline forged a second `OK` line."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "cluster_yamls" / "kuberay-autoscaling.yaml").read_text())
    raw["spec"]["workerGroupSpecs"][0]["groupName"] = "g\nOK other.yaml: \x1b[8mhidden"
    good = tmp_path / "k.yaml"
    good.write_text(yaml.safe_dump(raw))
    rc, out, err = cli(capsys, "cluster", "validate", good)
    assert rc == 2 and out == ""  # such a name is no Kubernetes label value (KubeRay labels pods with it)
    assert "\x1b" not in err and len(err.strip().splitlines()) == 1 and "groupName" in err, err
    del raw["spec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    rc, out, err = cli(capsys, "cluster", "validate", bad)
    assert rc == 2 and "\x1b" not in err and len(err.strip().splitlines()) == 1, err
