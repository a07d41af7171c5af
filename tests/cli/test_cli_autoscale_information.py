"""``autoscale simulate`` / ``autoscale compare`` run under the information model their flags
name (--durations, --estimate-error, --history), as the fixed-cluster commands do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"
JOBS = [  # (submit_s, model, gpus, duration_s): a queue forms, so the order SRSF picks depends on what it knows
    (0, "FSDP", 2, 2506), (302, "Transformer-XL", 4, 1645), (2015, "MoE", 4, 2167), (3122, "MoE", 8, 4294),
    (3479, "FSDP", 8, 600), (4143, "FSDP", 4, 1186), (5563, "MobileNetV3", 2, 3011), (6365, "Transformer-XL", 2, 1703),
    (8089, "Transformer-XL", 4, 8054), (9929, "Transformer-XL", 2, 1813), (11162, "GraphSage", 4, 6616),
    (13790, "Transformer-XL", 8, 5036),
]


def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "as.csv"
    path.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                    + "".join(f"j{i},{t},{m},{g},{d},\n" for i, (t, m, g, d) in enumerate(JOBS)))
    return path


@pytest.mark.parametrize("action", ["simulate", "compare"])
def test_durations_change_what_srsf_does_on_an_autoscaled_cluster(capsys, tmp_path, action):
    trace, results = small_trace(tmp_path), {}
    for durations in ("exact", "unknown"):
        path = tmp_path / f"{durations}.json"
        rc, _, err = cli(capsys, "autoscale", action, "--trace", trace, "--config", CONFIG, "--policy", "srsf+consolidated",
                         "--autoscaler", "demand", "--durations", durations, "--json", path, "--no-progress")
        assert rc == 0, err
        results[durations] = json.loads(path.read_text())
    assert results["exact"]["avg_jct_s"] != results["unknown"]["avg_jct_s"]


def test_estimate_error_is_used(capsys, tmp_path):
    trace, jct = small_trace(tmp_path), []
    for sigma in ("0", "1"):
        path = tmp_path / f"{sigma}.json"
        rc, _, err = cli(capsys, "autoscale", "simulate", "--trace", trace, "--config", CONFIG, "--policy", "srsf+consolidated",
                         "--durations", "estimated", "--estimate-error", sigma, "--seed", 1, "--json", path, "--no-progress")
        assert rc == 0, err
        jct.append(json.loads(path.read_text())["avg_jct_s"])
    path = tmp_path / "exact.json"
    cli(capsys, "autoscale", "simulate", "--trace", trace, "--config", CONFIG, "--policy", "srsf+consolidated",
        "--durations", "exact", "--json", path, "--no-progress")
    assert jct[0] == json.loads(path.read_text())["avg_jct_s"] != jct[1]  # no error: the estimate is the truth


def test_a_missing_history_file_is_refused(capsys, tmp_path):
    out = tmp_path / "r.json"
    rc, _, err = cli(capsys, "autoscale", "simulate", "--trace", small_trace(tmp_path), "--config", CONFIG,
                     "--history", tmp_path / "nope.csv", "--json", out, "--no-progress")
    assert rc == 2
    one_error_line(err, "--history", "nope.csv", "not found")
    assert not out.exists()
