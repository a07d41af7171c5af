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

