"""The JSON of ``simulate``, ``compare``, ``evaluate`` and ``autoscale simulate``/``compare``
says what the run's policies knew (``"information"``): exact, estimated (with which error and
seed) or unknown durations, learned or exact contention, and the history the run started with,
in the suite JSON's key names, with the phrase the human table's title shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"
NOT_LEARNED = {"contention_knowledge": "exact", "report_s": None, "measurement_noise": None}


def small_trace(folder: Path, name: str = "t.csv") -> Path:
    path = folder / name
    path.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                    "j0,0,FSDP,2,2506,\nj1,302,Transformer-XL,4,1645,\nj2,2015,MoE,4,2167,\nj3,3122,MoE,8,4294,\n")
    return path


def run_json(capsys, *argv: object) -> dict:  # type: ignore[no-untyped-def]
    rc, out, err = cli(capsys, *argv, "--json", "-")
    assert rc == 0, err
    return json.loads(out)


def test_simulate_records_estimated_durations_with_their_error_seed_and_history(capsys, tmp_path):
    past = small_trace(tmp_path, "past.csv")
    past.write_text(past.read_text().replace("\nj", "\nold-j"))  # jobs of the past, not the trace's own (refused)
    doc = run_json(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "srsf+packed", "--no-progress",
                   "--durations", "estimated", "--estimate-error", "0.5", "--seed", "3", "--history", past)
    assert doc["information"] == {"durations": "estimated", "estimate_error": 0.5, "estimate_seed": 3, **NOT_LEARNED,
                                  "history": {"file": str(past), "jobs": 4}, "description": "estimated (sigma 0.5)"}
    assert doc["jobs"] == 4  # the report's keys are still at the top level


def test_simulate_records_learned_contention(capsys, tmp_path):
    doc = run_json(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "srsf+packed", "--no-progress",
                   "--durations", "exact", "--contention-knowledge", "learned", "--perturb-contention", "0.2")
    info = doc["information"]
    assert info["durations"] == "exact" and info["estimate_error"] is None
    assert info["contention_knowledge"] == "learned" and info["estimate_seed"] == 0
    assert info["report_s"] > 0 and info["measurement_noise"] >= 0
    assert info["description"] == "exact, contention learned"


def test_compare_records_exact_durations_without_history(capsys, tmp_path):
    doc = run_json(capsys, "compare", "--trace", small_trace(tmp_path), "--policies", "fifo+packed,srsf+packed",
                   "--no-progress", "--durations", "exact")
    assert doc["information"] == {"durations": "exact", "estimate_error": None, "estimate_seed": None, **NOT_LEARNED,
                                  "history": None, "description": "exact"}
    assert set(doc["results"]) == {"fifo+packed", "srsf+packed"}


def test_evaluate_records_the_model_and_leaves_the_seed_to_its_seeds(capsys, tmp_path):
    doc = run_json(capsys, "evaluate", "--trace", small_trace(tmp_path), "--policies", "fifo+packed", "--seeds", "2")
    assert doc["information"]["durations"] == "estimated" and doc["information"]["estimate_error"] == 1.0
    assert doc["information"]["estimate_seed"] is None and doc["seeds"] == [0, 1]  # each seed drew its own


@pytest.mark.parametrize("action, autoscalers", [("simulate", "demand"), ("compare", "demand,fixed")])
def test_autoscale_records_unknown_durations(capsys, tmp_path, action, autoscalers):
    doc = run_json(capsys, "autoscale", action, "--trace", small_trace(tmp_path), "--config", CONFIG,
                   "--policy", "srsf+packed", "--autoscaler", autoscalers, "--durations", "unknown", "--no-progress")
    assert doc["information"] == {"durations": "unknown", "estimate_error": None, "estimate_seed": None, **NOT_LEARNED,
                                  "history": None, "description": "unknown"}
    assert ("results" in doc) == ("," in autoscalers)  # one report keeps its keys at the top level


def test_autoscale_table_title_names_the_durations(capsys, tmp_path):
    rc, out, err = cli(capsys, "autoscale", "simulate", "--trace", small_trace(tmp_path), "--config", CONFIG,
                       "--policy", "srsf+packed", "--durations", "estimated", "--estimate-error", "2", "--no-progress")
    assert rc == 0, err
    assert "durations estimated (sigma 2)" in " ".join(out.split())
