"""A review of how a policy's name becomes a policy, each case failing before its fix: a suite ran
two spellings of one policy as separate cells and found a bad argument only after it began; a
Serve config's misspelt policy reached every replica; ``scheduler start --policy ''`` ran
rl-hybrid; ``planner=1_6`` read 16 futures; ``--teacher planner=`` meant the defaults; a
megabyte name was quoted whole; ``planner=8`` was carried as a checkpoint beside a file named 8."""

from __future__ import annotations

import pytest
from cli_run import cli, one_error_line

from deepshare.cli.args import policy_files
from deepshare.core.errors import DeepShareError
from deepshare.experiments.policy_files import driver_files
from deepshare.experiments.suite_spec import load_suite
from deepshare.policies import make_policy
from deepshare.policies.teacher_spec import parse_teacher

SHIPPED_PPO = "deepshare/data/policies/rl_est_ppo.pt"
SUITE = ("name: t\njobs_per_node: 1\nloads: [1.0]\nmixes: [random]\nclusters: [[2, 8]]\ncontention: [profiled]\n"
         "seeds: 1\nheuristics: [fifo+consolidated]\n")


@pytest.mark.parametrize("learned, words", [
    (f"[rl-hybrid, 'rl-hybrid={SHIPPED_PPO}']", f"'rl-hybrid' and 'rl-hybrid={SHIPPED_PPO}' are the same policy"),
    ("[planner, planner=8]", "'planner' and 'planner=8' are the same policy with the same argument; list it once"),
    ("[planner=16, 'planner=16:']", "'planner=16' and 'planner=16:' are the same policy"),
    ("[planner=abc]", "planner=abc: expected K[:BUDGET_S[:CONTENTION[:HORIZON]]]"),
    ("['rl-base=missing.pt']", "missing.pt: file not found"),
])
def test_a_suite_builds_its_policies_before_it_runs(tmp_path, learned, words):
    (tmp_path / "s.yaml").write_text(SUITE + f"learned: {learned}\n")
    with pytest.raises(DeepShareError) as refused:
        load_suite(str(tmp_path / "s.yaml"))
    assert str(refused.value).startswith(f"{tmp_path / 's.yaml'}: learned: ") and words in str(refused.value)


def test_a_heuristic_given_an_argument_in_a_suite_names_the_file_and_field(tmp_path):
    (tmp_path / "s.yaml").write_text(SUITE.replace("[fifo+consolidated]", "[fifo+consolidated, srsf+packed=3]"))
    with pytest.raises(DeepShareError, match=r"s\.yaml: heuristics: policy 'srsf\+packed' takes no argument"):
        load_suite(str(tmp_path / "s.yaml"))


def test_a_serve_config_with_a_misspelt_policy_fails_when_the_app_is_built():
    from deepshare.serving.deployment import build_app

    with pytest.raises(DeepShareError, match="unknown policy 'srsf\\+packd'"):
        build_app({"policy": "srsf+packd"})
    with pytest.raises(DeepShareError, match="unknown model 'nosuch'"):
        build_app({"policy": "fifo+consolidated", "contention": "nosuch"})


def test_an_empty_scheduler_policy_is_refused_not_run_as_the_default(tmp_path, capsys):
    rc, _, err = cli(capsys, "scheduler", "start", "--policy", "")
    assert rc == 2
    one_error_line(err, "--policy '': an empty name")


@pytest.mark.parametrize("name", ["planner=1_6", "planner=\u0664", "planner=\uff18", "planner= 8", "planner=8:1_0",
                                  "planner=8::profiled:1_000", "planner=" + "9" * 5000])
def test_planner_numbers_are_ascii(name):
    with pytest.raises(DeepShareError) as refused:
        make_policy(name)
    assert len(str(refused.value)) < 400


def test_planner_numbers_written_plainly_still_work():
    assert make_policy("planner=16:2.5::3600").config.futures == 16
    assert make_policy("planner=+8").config.futures == 8


def test_with_margin_takes_ascii_numbers_only():
    from deepshare.policies.hybrid_preempt import with_margin

    with pytest.raises(DeepShareError, match="with_margin='1_0': expected a number >= 0"):
        with_margin("1_0")


@pytest.mark.parametrize("teacher", ["planner=", " planner=8", "planner =8"])
def test_a_teacher_is_the_planner_as_the_registry_spells_it(teacher):
    with pytest.raises(DeepShareError, match="^--teacher "):
        parse_teacher(teacher)


@pytest.mark.parametrize("name", ["x" * 1_000_000, "planner=8::" + "x" * 1_000_000, "las+consolidated=" + "x" * 1_000_000,
                                  "rl-base=" + "x" * 1_000_000])
def test_a_name_of_a_megabyte_is_quoted_cut_short(name):
    with pytest.raises(DeepShareError) as refused:
        make_policy(name)
    assert len(str(refused.value)) < 600


def test_the_planners_argument_is_no_file_even_beside_one_of_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "8").write_bytes(b"not a checkpoint")
    (tmp_path / "p.pt").write_bytes(b"weights")
    assert policy_files(["planner=8", "rl-base=p.pt"]) == ["p.pt"]
    assert driver_files(["planner=8", "rl-base=p.pt"]) == {"rl-base=p.pt": b"weights"}
