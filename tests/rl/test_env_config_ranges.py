"""A training config's env numbers, lists and names are checked when the config is read (before
Ray starts): one line naming the file and the field, for what used to pass and then train on a
NaN reward, fail in an env runner, or end in a traceback (``imitate`` with no node counts)."""

from __future__ import annotations

import pytest
from cli_run import cli, one_error_line

from deepshare.rl.env import EnvConfig

@pytest.fixture(autouse=True)
def no_training(monkeypatch):
    """A config that passes would start training: fail at once instead."""
    import deepshare.rl.imitate
    import deepshare.rl.train

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the config was accepted and training started")

    monkeypatch.setattr(deepshare.rl.train, "train", started)
    monkeypatch.setattr(deepshare.rl.imitate, "imitate", started)


BASE = "name: x\nenv:\n  generated_fraction: 1.0\n  generated_jobs: 4\n  generated_nodes: [1]\n"


@pytest.mark.parametrize("field, value", [
    ("reward_scale", ".nan"), ("reward_scale", "0"), ("reward_scale", ".inf"),
    ("w1", ".inf"), ("w2", "-1"), ("ewma_alpha", "2"), ("ewma_alpha", "0"),
    ("hybrid_min_ratio", ".nan"), ("hybrid_utilisation_floor", "-0.5"), ("hybrid_utilisation_floor", "1.5"),
    ("round_s", "-5"), ("round_s", "0"), ("round_s", "1e12"), ("max_steps", "0"),
    ("generated_jobs", "0"), ("generated_jobs", "-3"), ("generated_jobs", "1000000000000"),
    ("contention", "bogus"), ("generated_mixes", "[nosuchmix]"), ("generated_mixes", "[]"), ("generated_nodes", "[]"),
])
def test_train_refuses_a_bad_env_value_naming_the_file_and_field(capsys, tmp_path, field, value):
    lines = [line for line in BASE.splitlines() if not line.startswith(f"  {field}:")]
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join(lines) + f"\n  {field}: {value}\n")
    rc, _, err = cli(capsys, "train", path, "--out", tmp_path / "run")
    assert rc == 2
    one_error_line(err, f"{path}: env config: {field}: ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec", ["nonexistent.yaml", "broken.yaml"])
def test_train_refuses_a_bad_cluster_without_traces_naming_the_file_and_field(capsys, tmp_path, spec):
    """Generated episodes alone do not use ``cluster``; a missing or malformed spec file named
    there was still accepted, and failed only once traces were added."""
    (tmp_path / "broken.yaml").write_text("name: b\nnodes: 3\n")
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + f"  cluster: {spec}\n")
    rc, _, err = cli(capsys, "train", path, "--out", tmp_path / "run")
    assert rc == 2
    one_error_line(err, f"{path}: env config: cluster" if spec == "nonexistent.yaml" else str(tmp_path / spec))
    assert not (tmp_path / "run").exists()


def test_imitate_refuses_no_node_counts_without_a_traceback(capsys, tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text(BASE.replace("generated_nodes: [1]", "generated_nodes: []"))
    rc, _, err = cli(capsys, "imitate", path, "--out", tmp_path / "run")
    assert rc == 2
    one_error_line(err, "env config: generated_nodes: expected one or more node counts")


def test_generated_clusters_stand_in_for_node_counts():
    config = EnvConfig.from_dict({"generated_nodes": [], "generated_clusters": ["testbed"]})
    assert config.generated_clusters == ("testbed",)


def test_values_at_the_edges_of_the_ranges_load():
    config = EnvConfig.from_dict({"reward_scale": 0.01, "w1": 0, "ewma_alpha": 1, "hybrid_min_ratio": 1.01,
                                  "hybrid_utilisation_floor": 0, "round_s": 1, "max_steps": 1, "generated_jobs": 10_000_000,
                                  "contention": "none", "generated_mixes": ["llm"]})
    assert config.round_s == 1 and config.generated_jobs == 10_000_000
