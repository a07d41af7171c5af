"""model.init_from / --init-from (deepshare.rl.train.with_init_from): a file that would fail, or
mean something else, inside the RLModule of every env runner is refused when the config is read,
with one line naming it. No Ray, no training."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from deepshare.core.errors import DeepShareError
from deepshare.policies.checkpoint import policy_file_bytes
from deepshare.policies.scorer_net import CandidateScorer
from deepshare.rl.env import EnvConfig
from deepshare.rl.train import load_train_config, with_init_from

ROOT = Path(__file__).resolve().parents[2]
ENV = {"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2]}


def config(tmp_path: Path, env_lines: str = ""):
    path = tmp_path / "small.yaml"
    path.write_text("name: small\nenv:\n  generated_fraction: 1.0\n  generated_jobs: 30\n  generated_nodes: [2]\n"
                    f"{env_lines}model:\n  hidden: 16\n", encoding="utf-8")
    return load_train_config(path)


def policy(tmp_path: Path, name: str, *, hidden: int = 16, declared: int | None = None, env: dict | None = None,
           poison: bool = False) -> Path:
    """A policy file of a ``hidden``-wide scorer for ``env``'s encoding, saying it is ``declared`` wide."""
    encoding = EnvConfig.from_dict({**ENV, **(env or {})}).encoding
    net = CandidateScorer(len(encoding.features), hidden)
    if poison:
        with torch.no_grad():
            net.trunk[0].weight[0, 0] = math.nan
    if declared is not None:
        net.hidden = declared
    path = tmp_path / name
    path.write_bytes(policy_file_bytes(net, encoding, {"trainer": "test"}))
    return path


def test_a_matching_file_is_accepted_and_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy(tmp_path, "ok.pt")
    assert with_init_from(config(tmp_path), "ok.pt").model.init_from == str(tmp_path / "ok.pt")


def test_weights_of_another_width_than_the_file_declares_are_refused_in_one_line(tmp_path):
    bad = policy(tmp_path, "narrow.pt", hidden=8, declared=16)  # says 16 wide (the config's), holds 8-wide weights
    with pytest.raises(DeepShareError, match=r"model.init_from: policy checkpoint .*narrow.pt: state_dict: expected") as err:
        with_init_from(config(tmp_path), bad)
    assert "\n" not in str(err.value)


def test_nan_weights_are_refused_in_one_line(tmp_path):
    bad = policy(tmp_path, "nan.pt", poison=True)
    with pytest.raises(DeepShareError, match=r"nan.pt: state_dict: trunk.0.weight holds NaN"):
        with_init_from(config(tmp_path), bad)


@pytest.mark.parametrize("field, value, yaml", [
    ("anchor", ["las", "spread"], "  anchor: [las, spread]\n"),
    ("offer_order", "las", "  offer_order: las\n"),
    ("max_candidates", 8, "  max_candidates: 8\n"),
    ("jobs_considered", 3, "  jobs_considered: 3\n"),
])
def test_a_file_of_another_encoding_is_refused_naming_the_field(tmp_path, field, value, yaml):
    other = policy(tmp_path, "other.pt", env={field: value})
    with pytest.raises(DeepShareError, match=rf"other.pt: its scorer was trained with {field} .*set env.{field}"):
        with_init_from(config(tmp_path), other)
    with_init_from(config(tmp_path, yaml), other)  # the config that says so takes it


def test_max_wait_s_may_differ(tmp_path):
    with_init_from(config(tmp_path, "  max_wait_s: 600\n"), policy(tmp_path, "free.pt"))


def test_the_module_loads_the_checked_weights(tmp_path):
    from deepshare.rl.env import DeepShareEnv
    from deepshare.rl.module import CandidatePPOModule

    path = policy(tmp_path, "ok.pt")
    env = DeepShareEnv(EnvConfig.from_dict(ENV))
    module = CandidatePPOModule(observation_space=env.observation_space, action_space=env.action_space,
                                model_config={"hidden": 16, "init_from": str(path)})
    expected = torch.load(path, weights_only=True)["state_dict"]
    assert all(t.equal(expected[name]) for name, t in module.scorer.state_dict().items())


# -- the documented warm starts ------------------------------------------------------------------
IMITATE = re.compile(r"deepshare imitate (rllib_configs/\S+\.yaml)[^\n\"]*?--out (\S+)")
WARM = re.compile(r"deepshare train (rllib_configs/\S+\.yaml)[^\n\"]*?--init-from (\S+)")
DOCUMENTED = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "deepshare" / "data" / "policies" / "README.md",
              *sorted((ROOT / "rllib_configs").glob("*.yaml")), ROOT / "deepshare" / "cli" / "train.py"]


def documented_warm_starts() -> list[tuple[str, str, str]]:
    """(where, train config, imitate config or shipped policy file) for every ``deepshare train
    CONFIG --init-from X`` in the docs, the CLI's examples and the configs' headers whose X is a
    shipped file or the policy.pt of a ``deepshare imitate CONFIG --out DIR`` in the same file."""
    found = []
    for path in DOCUMENTED:
        text = path.read_text(encoding="utf-8")
        made = {f"{out.rstrip('/')}/policy.pt": config for config, out in IMITATE.findall(text)}
        for config, init in WARM.findall(text):
            source = made.get(init) or (init if (ROOT / init).is_file() else None)
            if source is not None:
                found.append((path.name, config, source))
    return found


def test_the_documented_warm_starts_are_found():
    pairs = {(where, config, source) for where, config, source in documented_warm_starts()}
    assert ("learned-policies.md", "rllib_configs/rl_unc_warm.yaml", "rllib_configs/rl_unc_imitate.yaml") in pairs
    assert ("train.py", "rllib_configs/rl_unc_warm.yaml", "rllib_configs/rl_unc_imitate.yaml") in pairs
    assert ("rl_hybrid_warm.yaml", "rllib_configs/rl_hybrid_warm.yaml", "deepshare/data/policies/rl_base_dagger.pt") in pairs


@pytest.mark.parametrize("where, config, source", documented_warm_starts())
def test_a_documented_warm_start_takes_its_policy_file(tmp_path, where, config, source):
    """What ``deepshare imitate SOURCE`` writes (a scorer of its config's width and encoding; the
    weights do not matter to the check) is what ``deepshare train CONFIG --init-from`` accepts."""
    if source.endswith(".pt"):
        made = ROOT / source
    else:
        imitated = load_train_config(ROOT / source)
        encoding = imitated.env_config(ROOT / "rllib_configs").encoding
        made = tmp_path / "policy.pt"
        made.write_bytes(policy_file_bytes(CandidateScorer(len(encoding.features), imitated.model.hidden), encoding,
                                           {"trainer": "imitation (test)"}))
    with_init_from(load_train_config(ROOT / config), made)


def test_the_shipped_unc_imitation_warm_starts_rl_unc_warm():
    """rl_unc_imitation.pt is what the documented imitate command shipped."""
    with_init_from(load_train_config(ROOT / "rllib_configs" / "rl_unc_warm.yaml"),
                   ROOT / "deepshare" / "data" / "policies" / "rl_unc_imitation.pt")
