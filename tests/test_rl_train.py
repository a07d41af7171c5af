"""Training through the CLI on a tiny config, resuming, and using the result as a policy."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.types import DeepShareError
from deepshare.policies import make_policy
from deepshare.rl.train import load_train_config

TINY = Path(__file__).resolve().parent / "fixtures" / "rl" / "tiny.yaml"
TRACE = Path(__file__).resolve().parent.parent / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One real 1-iteration run, then one resumed iteration (Ray starts and stops here)."""
    import ray

    os.environ.setdefault("RAY_TMPDIR", str(tmp_path_factory.mktemp("ray")))
    run = tmp_path_factory.mktemp("run") / "tiny"
    try:
        assert main(["train", str(TINY), "--out", str(run)]) == 0
        first = sorted(p.name for p in (run / "checkpoints").iterdir())
        assert main(["train", str(TINY), "--resume", str(run), "--iterations", "2"]) == 0
    finally:
        ray.shutdown()
    return run, first


def test_train_writes_metrics_checkpoints_and_a_policy(trained):
    run, first = trained
    assert first == ["iter_0001"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_0001", "iter_0002"]
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(float(r["iteration"])) for r in rows] == [1, 2]  # the resumed run continued the count
    assert float(rows[1]["env_steps_lifetime"]) > float(rows[0]["env_steps_lifetime"]) > 0
    assert any((run / "tb").iterdir())
    assert (run / "policy.pt").stat().st_size < 200_000


def test_the_trained_policy_loads_as_rl_hybrid_and_decides_feasibly(trained, capsys, tmp_path):
    run, _ = trained
    policy = make_policy(f"rl-hybrid={run / 'policy.pt'}")
    assert policy.metadata["name"] == "tiny_hybrid" and policy.metadata["iterations"] == 2
    assert main(["evaluate", "--trace", str(TRACE), "--policies", f"rl-hybrid={run / 'policy.pt'},rl-base={run / 'policy.pt'}",
                 "--seeds", "1", "--json", str(tmp_path / "e.json")]) == 0
    results = json.loads((tmp_path / "e.json").read_text())["results"]
    assert all(r["finished"] == 256 for r in results.values())  # every decision was feasible


@pytest.mark.parametrize(
    "text, needle",
    [
        ("name: x\nppo: {lr: -1}\n", "ppo.lr"),
        ("name: x\nbogus: 1\n", "bogus"),
        ("ppo: {}\n", "name"),
        ("name: x\nenv: {reward: speed}\n", "reward"),
        ("name: x\nenv: {traces: [missing.json]}\n", "missing.json"),
        ("- a list\n", "expected a mapping"),
    ],
)
def test_bad_training_configs_are_named(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(DeepShareError, match=needle):
        load_train_config(path)


def test_train_cli_reports_a_missing_config_and_a_missing_resume_folder(capsys, tmp_path):
    assert main(["train", str(tmp_path / "none.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["train", str(TINY), "--resume", str(tmp_path)]) == 2
    assert "no checkpoints" in capsys.readouterr().err
