"""The multi-node training path, locally: ``deepshare train ... --address ADDR --num-env-runners 2``
against a fake 3-node Ray cluster whose head has no CPUs, as on the cluster YAMLs.

With no CPU on the head, each of the two env runners (one CPU each) can only run on one of
the two worker nodes, so a finished iteration with sampled steps means the rollout really ran
on two other nodes while the learner ran in the driver.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from deepshare.cli import main
from raytools import ray_tmpdir

pytestmark = pytest.mark.slow  # fake Ray clusters and RLlib training

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "rl" / "tiny.yaml"


def test_train_joins_a_multi_node_cluster_and_runs_env_runners_on_the_workers(fake_cluster, tmp_path, capsys):
    import ray

    run = tmp_path / "run"
    assert main(["train", str(TINY), "--out", str(run), "--address", fake_cluster.address,
                 "--num-env-runners", "2", "--iterations", "1"]) == 0
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 3
    assert sorted(n["Resources"].get("CPU", 0) for n in nodes) == [0, 1, 1]  # the runners had to go to the workers
    assert ray.cluster_resources().get("deepshare_fabric_nvlink") == 1
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert len(rows) == 1 and float(rows[0]["env_steps_lifetime"]) > 0
    assert (run / "policy.pt").exists() and (run / "checkpoints" / "iter_0001").is_dir()
    assert "policy written to" in capsys.readouterr().out


def test_cluster_fake_starts_prints_the_address_and_stops(capsys):
    with ray_tmpdir():
        assert main(["cluster", "fake", "--workers", "1", "--for-s", "0"]) == 0
        out = capsys.readouterr().out
        assert "address" in out and "--num-env-runners 1" in out and "fake cluster stopped" in out
        assert main(["cluster", "fake", "--fabrics", "copper", "--for-s", "0"]) == 2
