"""The RL environment and the shared encoding: contract checks, determinism, mask, round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec
from deepshare.policies.encoding import FEATURES, WAIT_INDEX, EncodingConfig, PartialDecision, decode, encode
from deepshare.rl.env import DeepShareEnv, EnvConfig

TRACE = str(Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-train-jobset0-episode0.json")
SMALL = {"generated_fraction": 1.0, "generated_jobs": 40, "generated_nodes": [2, 4]}


def play(env, seed, pick):
    obs, _ = env.reset(seed=seed)
    trajectory, done, info = [], False, {}
    while not done:
        action = pick(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        trajectory.append((action, reward, obs["observations"].copy(), obs["action_mask"].copy()))
        done = terminated or truncated
    return trajectory, info


def first_launch(obs):
    valid = np.flatnonzero(obs["action_mask"])
    return int(valid[1]) if len(valid) > 1 else int(valid[0])


def test_passes_the_gymnasium_env_checker():
    check_env(DeepShareEnv(SMALL), skip_render_check=True)


def test_gymnasium_make_builds_the_env_by_its_registered_id():
    """``gymnasium.make("deepshare.rl:DeepShare-v0")`` imports the package, which registers the id;
    the made env steps in lockstep with one built directly from the same config."""
    import subprocess
    import sys

    import gymnasium

    code = "import gymnasium; e = gymnasium.make('deepshare.rl:DeepShare-v0'); print(e.unwrapped.__class__.__name__)"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (fresh.returncode, fresh.stdout) == (0, "DeepShareEnv\n"), fresh.stderr[-2000:]
    made = gymnasium.make("DeepShare-v0", config=SMALL)
    assert isinstance(made.unwrapped, DeepShareEnv) and made.spec.id == "DeepShare-v0"
    direct = DeepShareEnv(SMALL)
    obs_made, _ = made.reset(seed=3)
    obs_direct, _ = direct.reset(seed=3)
    for _ in range(5):
        assert np.array_equal(obs_made["observations"], obs_direct["observations"])
        action = first_launch(obs_made)
        obs_made, reward_made, *_ = made.step(action)
        obs_direct, reward_direct, *_ = direct.step(action)
        assert reward_made == reward_direct


def test_spaces_match_the_encoding():
    env = DeepShareEnv({**SMALL, "max_candidates": 8})
    assert env.observation_space["observations"].shape == (8, len(FEATURES))
    assert env.action_space.n == 8


def test_two_envs_with_the_same_seed_step_in_lockstep():
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)

    def random_valid(rng):
        return lambda obs: int(rng.choice(np.flatnonzero(obs["action_mask"])))

    a, info_a = play(DeepShareEnv(SMALL), 11, random_valid(rng_a))
    b, info_b = play(DeepShareEnv(SMALL), 11, random_valid(rng_b))
    assert len(a) == len(b) > 10
    for (act_a, r_a, o_a, m_a), (act_b, r_b, o_b, m_b) in zip(a, b):
        assert act_a == act_b and r_a == r_b
        assert np.array_equal(o_a, o_b) and np.array_equal(m_a, m_b)
    assert info_a["report"] == info_b["report"]


def test_jct_return_is_minus_the_average_jct_in_hours():
    trajectory, info = play(DeepShareEnv({"traces": [TRACE]}), 0, first_launch)
    assert sum(r for _, r, _, _ in trajectory) == pytest.approx(-info["report"]["avg_jct_s"] / 3600.0, rel=1e-9)
    assert info["report"]["finished"] == 256


def test_original_reward_is_the_weighted_contention_and_utilisation_signal_per_round():
    env = DeepShareEnv({**SMALL, "reward": "original", "w1": 1.0, "w2": 0.0})
    trajectory, info = play(env, 3, first_launch)
    rounds = info["report"]["makespan_s"] / 300.0
    assert all(r <= 0.0 for _, r, _, _ in trajectory)
    assert sum(r for _, r, _, _ in trajectory) >= -rounds  # at most one unit of loss per 300 s round
    trajectory, info = play(DeepShareEnv({**SMALL, "reward": "original", "w1": 0.0, "w2": 1.0}), 3, first_launch)
    assert all(r >= 0.0 for _, r, _, _ in trajectory) and any(r > 0 for _, r, _, _ in trajectory)
    assert sum(r for _, r, _, _ in trajectory) <= info["report"]["makespan_s"] / 300.0 + 1e-9


def test_mask_is_exactly_the_feasible_candidates():
    jobs = [JobSpec(f"j{i}", "MoE", g, 0.0, duration_s=600.0) for i, g in enumerate([4, 2, 8, 2, 1])]
    sim = Simulator(uniform(2, 4), jobs, make_contention("profiled"))
    view = sim.advance()
    config = EncodingConfig(max_candidates=12, jobs_considered=4)
    partial = PartialDecision(view)
    while True:
        obs, rows = encode(partial, config)
        mask = obs["action_mask"]
        assert mask.shape == (12,)
        assert set(np.flatnonzero(mask)) <= set(range(len(rows)))
        assert mask[len(rows):].sum() == 0
        for i, row in enumerate(rows[1:], start=1):
            assert mask[i] == 1
            assert row.job.gpus <= 4 * 2 and row.placement.total_gpus == row.job.gpus
            assert all(partial.free[n] >= g for n, g in row.placement.alloc)
        # nothing runs and every GPU is free: waiting with a launch possible is masked
        assert mask[WAIT_INDEX] == (0.0 if len(rows) > 1 and not partial.launches else 1.0)
        if len(rows) == 1:
            break
        partial = partial.with_launch(rows[1].job, rows[1].placement)
    sim.apply(partial.decision)  # all launches together are feasible
    assert sum(sim.view().free) == 8 - sum(l.placement.total_gpus for l in partial.launches)


def test_encode_decode_round_trip():
    env = DeepShareEnv(SMALL)
    obs, _ = env.reset(seed=2)
    ep = env._episode
    config = env.config.encoding
    for action in np.flatnonzero(obs["action_mask"]):
        assert decode(int(action), ep.partial, config) == ep.rows[action]
    with pytest.raises(ValueError):
        decode(config.max_candidates + 1, ep.partial, config)


def test_a_masked_action_is_taken_as_wait_and_flagged():
    env = DeepShareEnv(SMALL)
    obs, _ = env.reset(seed=4)
    masked = np.flatnonzero(obs["action_mask"] == 0)
    _, _, _, _, info = env.step(int(masked[0]))
    assert info["invalid_action"] is True


@pytest.mark.parametrize(
    "config, needle",
    [
        ({"bogus": 1}, "unknown key"), ({"reward": "speed"}, "reward"), ({"generated_fraction": 2}, "generated_fraction"),
        ({"anchor": ["srsf"]}, "anchor must be"), ({"anchor": ["nope", "packed"]}, "anchor order 'nope'"),
        ({"anchor": ["srsf", "x"]}, "anchor placement 'x'"), ({"contentions": ["profiled", "magic"]}, "contentions"),
        ({"max_wait_s": -5}, "max_wait_s"), ({"max_wait_s": "soon"}, "max_wait_s"),
        ({"generated_loads": [float("nan")]}, "generated_loads"), ({"generated_loads": [0]}, "generated_loads"),
        ({"generated_loads": [1e-300, 1]}, "generated_loads: expected one or more loads in \\[0.01, 10\\]"),
        ({"generated_loads": []}, "generated_loads"),
    ],
)
def test_bad_env_config_is_named(config, needle):
    with pytest.raises(DeepShareError, match=needle):
        EnvConfig.from_dict(config)


def test_episodes_vary_with_the_seed_over_scenarios():
    env = DeepShareEnv({"generated_fraction": 1.0, "generated_jobs": 10, "generated_nodes": [2, 4, 8]})
    nodes = {env.reset(seed=s)[1]["nodes"] for s in range(12)}
    assert len(nodes) > 1


def test_anchor_and_contentions_reach_the_encoding_the_safety_net_and_the_episodes():
    config = EnvConfig.from_dict({"anchor": ["las", "packed"], "hybrid": True, "contentions": ["none", "link"]})
    assert config.encoding.anchor == ("las", "packed")
    assert config.hybrid_rules.anchor == ("las", "packed") and config.hybrid_rules.min_ratio == 0.9
    assert EnvConfig.from_dict({"anchor": None}).encoding.anchor is None
    env = DeepShareEnv({"generated_fraction": 1.0, "generated_jobs": 6, "generated_nodes": [2], "contentions": ["none", "link"]})
    kinds = set()
    for seed in range(8):
        env.reset(seed=seed)
        kinds.add(type(env._episode.sim.contention).__name__)
    assert len(kinds) == 2


def test_max_wait_s_reaches_the_encoding_and_masks_wait_in_episodes():
    assert EnvConfig.from_dict({}).encoding.max_wait_s is None
    assert EnvConfig.from_dict({"max_wait_s": 600}).encoding.max_wait_s == 600
    bounded = DeepShareEnv({"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2], "max_wait_s": 0})
    obs, _ = bounded.reset(seed=3)
    waits = []
    for _ in range(40):  # with a 0 s bound, wait is never offered while a launch is
        launches = obs["action_mask"][1:].sum()
        waits.append((launches > 0, obs["action_mask"][0]))
        obs, _, done, truncated, _ = bounded.step(0)
        if done or truncated:
            break
    assert all(mask == 0 for fits, mask in waits if fits)


def _traces(tmp_path):
    """A trace whose first job (64 GPUs) no testbed node set can hold, and one whose first fits."""
    from deepshare.core.traces.canonical import write_canonical

    big = [JobSpec("big", "MobileNetV3", 64, submit_time=0.0, duration_s=3600),
           JobSpec("ok", "MobileNetV3", 4, submit_time=60.0, duration_s=3600)]
    fits = [JobSpec("a", "MobileNetV3", 4, submit_time=0.0, duration_s=3600),
            JobSpec("b", "MobileNetV3", 8, submit_time=60.0, duration_s=1800)]
    write_canonical(big, tmp_path / "big_first.json")
    write_canonical(fits, tmp_path / "fits.json")
    return str(tmp_path / "big_first.json"), str(tmp_path / "fits.json")


def test_a_scenario_without_a_decision_is_drawn_again_and_the_episode_steps(tmp_path):
    """Capped at one job, an episode of big_first has nothing to decide (its job is rejected on
    arrival): reset draws again, from the same generator, so the env runner's next step works and
    a seed still names one episode."""
    big, fits = _traces(tmp_path)
    config = {"traces": [big, fits], "contention": "none", "durations": "exact"}
    envs = [DeepShareEnv(config), DeepShareEnv(config)]
    for env in envs:
        env.set_max_jobs(1)
    first = []  # the trace reset draws first for each seed: rng.random() (traces or generated?), then the trace
    for seed in range(8):
        rng = np.random.default_rng(seed)
        rng.random()
        first.append(int(rng.integers(2)))
    assert 0 in first and 1 in first  # some seeds draw big_first first
    for seed in range(8):
        (obs, info), (again, _) = (env.reset(seed=seed) for env in envs)
        assert info["jobs"] == 1 and obs["action_mask"].sum() > 1  # a launch to choose
        assert np.array_equal(obs["observations"], again["observations"])
        _, _, terminated, _, step_info = envs[0].step(first_launch(obs))
        assert terminated and step_info["report"]["finished"] == 1


def test_no_scenario_with_a_decision_is_one_clear_error(tmp_path):
    big, _ = _traces(tmp_path)
    env = DeepShareEnv({"traces": [big], "contention": "none", "durations": "exact"})
    env.set_max_jobs(1)
    with pytest.raises(DeepShareError, match=r"scenarios drawn in a row offered no decision \(episodes capped at 1 jobs"):
        env.reset(seed=0)


def _tiny_original(tmp_path, **reward):
    """One node of 8 GPUs: a (4 GPUs, t=0, 1 h), b (8, t=600, 30 min), c (4, t=1200, 2 h); with
    every first launch taken, a runs over [0, 3600], c over [1200, 8400], b over [8400, 10200]."""
    from deepshare.core.traces.canonical import write_canonical
    from deepshare.rl.scenarios import CLUSTER_YAML

    (tmp_path / "cluster.yaml").write_text(CLUSTER_YAML)
    write_canonical([JobSpec("a", "MobileNetV3", 4, submit_time=0.0, duration_s=3600),
                     JobSpec("b", "MobileNetV3", 8, submit_time=600.0, duration_s=1800),
                     JobSpec("c", "MobileNetV3", 4, submit_time=1200.0, duration_s=7200)], tmp_path / "trace.json")
    env = DeepShareEnv({"traces": [str(tmp_path / "trace.json")], "cluster": str(tmp_path / "cluster.yaml"),
                        "contention": "none", "durations": "exact", "reward": "original", **reward})
    env.set_report_elapsed(True)
    trajectory, info = play(env, 0, first_launch)
    return [r for _, r, _, _ in trajectory], info


def test_original_reward_integrates_utilisation_over_each_round_and_moves_the_ewma_per_round(tmp_path):
    """Per 300 s round: utilisation 0.5 for rounds 0-3, 1.0 for 4-11 (a and c), 0.5 for 12-27
    (c alone: b does not fit beside it), 1.0 for 28-33 (b). The steps cover [0, 1200],
    [1200, 8400] and [8400, 10200]; each is paid for the rounds that end in it, whatever the view
    at its end says (the old reward paid the utilisation of the next decision point: 0.5, 0, 0)."""
    utils = [0.5] * 4 + [1.0] * 8 + [0.5] * 16 + [1.0] * 6
    rewards, _ = _tiny_original(tmp_path, w1=0.0, w2=1.0, ewma_alpha=1.0)
    assert rewards == pytest.approx([2.0, 16.0, 6.0], abs=1e-12)
    rewards, _ = _tiny_original(tmp_path, w1=0.0, w2=1.0, ewma_alpha=0.25)
    ewma, per_round = 0.0, []
    for u in utils:  # the artifact's EWMA: one update per round
        ewma = 0.75 * ewma + 0.25 * u
        per_round.append(ewma)
    assert rewards == pytest.approx([sum(per_round[:4]), sum(per_round[4:28]), sum(per_round[28:])], abs=1e-12)


def test_original_reward_with_alpha_one_sums_to_the_utilisation_integral_in_rounds():
    """Rounds cut across steps and end mid-round here; with the EWMA at alpha 1 and w2 = 1 the
    return is the GPU-seconds held over the capacity, in 300 s rounds (the episode starts at 0)."""
    for seed in (3, 5):
        trajectory, info = play(DeepShareEnv({**SMALL, "reward": "original", "w1": 0.0, "w2": 1.0, "ewma_alpha": 1.0}),
                                seed, first_launch)
        report = info["report"]
        assert sum(r for _, r, _, _ in trajectory) == pytest.approx(report["gpu_util"] * report["makespan_s"] / 300.0,
                                                                    rel=1e-9)
