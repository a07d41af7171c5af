"""Training episodes drawn like the ``fabric`` suite's cells (deepshare.rl.generated).

The env's generated episodes with the suite's parameters are the suite's cells: for each drawn
(preset, load, mix, trace seed) the jobs are exactly ``suite_cells.cell_trace`` of the cell with
that seed, so the training distribution is the suite's and only the seeds differ (below 2^31 for
training, 2^31 and up for the suite's held-out traces). Also: determinism, the new fields'
validation, an episode stepped to its end on a fabric preset, the shipped training config, and the
encoding's placement generators surviving a policy file's export and load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.topology import load_topology
from deepshare.experiments.suite_cells import Cell, cell_topology, cell_trace, cells
from deepshare.experiments.suite_spec import SUITE_SEED_BASE, load_suite
from deepshare.policies.encoding import EncodingConfig
from deepshare.rl.env import DeepShareEnv, EnvConfig
from deepshare.rl.generated import TRAINING_SEED_LIMIT, draw_generated, generated_trace
from deepshare.rl.train import load_train_config

ROOT = Path(__file__).resolve().parents[2]
FABRIC_CONFIG = ROOT / "rllib_configs" / "fabric_imitate.yaml"
TOPO_GENERATORS = ("topo-bestfit", "topo-balanced", "topo-aware", "consolidated")


def suite_env(spec, **extra) -> dict:
    """The env config whose generated episodes are drawn like ``spec``'s fabric cells."""
    return {
        "generated_fraction": 1.0,
        "generated_clusters": list(spec.fabrics),
        "generated_jobs_per_node": spec.jobs_per_node,
        "generated_loads": list(spec.loads),
        "generated_mixes": list(spec.mixes),
        "generated_demand": spec.demand,
        "generated_required_level": spec.required_level,
        "generated_required_share": spec.required_share,
        "generated_preferred_level": spec.preferred_level,
        "generated_preferred_share": spec.preferred_share,
        "generated_duration_sigma": spec.duration_sigma,
        "contention": spec.contention[0],
        "durations": list(spec.durations),
        "estimate_errors": [spec.estimate_error],
        **extra,
    }


@pytest.fixture(scope="module")
def spec():
    spec = load_suite("fabric")
    # What the env does not configure must be what the generator does by default.
    assert spec.recurrence is None and spec.median_duration_s == 3600.0
    assert len(spec.contention) == 1 and len(spec.durations) == 1
    return spec


def cell_of(spec, episode) -> Cell:
    topology = load_topology(episode.cluster)
    return Cell(episode.load, episode.mix, len(topology.nodes), max(topology.capacity), spec.contention[0],
                episode.seed, spec.durations[0], cluster=episode.cluster)


def test_generated_episodes_are_the_suites_cells_of_their_seeds(spec):
    env = DeepShareEnv(suite_env(spec))
    wanted = {(preset, mix) for preset in spec.fabrics for mix in spec.mixes}
    seen = set()
    for seed in range(64):
        _, info = env.reset(seed=seed)
        episode = env.generated_episode
        assert episode is not None and episode.cluster in spec.fabrics
        expected = list(cell_trace(spec, cell_of(spec, episode)))
        assert list(episode.jobs) == expected
        assert info["jobs"] == len(expected) == spec.jobs_per_node * info["nodes"]
        assert episode.topology == load_topology(episode.cluster)
        assert any(job.topology.required_level == "leaf" for job in expected)
        assert any(job.topology.preferred_level == "leaf" for job in expected)
        seen.add((episode.cluster, episode.mix))
        if seen == wanted:
            break
    assert seen == wanted  # every preset and mix was drawn


def test_the_suites_own_cells_are_the_env_generators_traces(spec):
    """The other way round: every suite cell's (preset, load, mix, seed) through the env's trace
    generator gives that cell's jobs (its seed, >= 2^31, being one training never draws)."""
    config = EnvConfig.from_dict(suite_env(spec))
    traces = {}
    for cell in cells(spec):
        assert cell.seed >= SUITE_SEED_BASE
        key = (cell.cluster, cell.load, cell.mix, cell.seed)
        if key not in traces:
            traces[key] = generated_trace(config, cell_topology(cell), cell.load, cell.mix, cell.seed)
            assert list(traces[key]) == list(cell_trace(spec, cell))
    assert len(traces) == len(spec.fabrics) * len(spec.loads) * len(spec.mixes) * spec.seeds


def test_generated_episodes_are_deterministic_under_a_seed(spec):
    first, second = DeepShareEnv(suite_env(spec)), DeepShareEnv(suite_env(spec))
    for seed in (3, 11):
        obs1, info1 = first.reset(seed=seed)
        obs2, info2 = second.reset(seed=seed)
        assert first.generated_episode == second.generated_episode and info1 == info2
        for key in obs1:
            assert np.array_equal(obs1[key], obs2[key])
    second.reset(seed=4)
    assert second.generated_episode.seed != first.generated_episode.seed  # another seed, another trace


def test_every_drawn_trace_seed_is_below_the_suites_range():
    assert TRAINING_SEED_LIMIT == SUITE_SEED_BASE == 2**31
    config = EnvConfig.from_dict({"generated_fraction": 1.0, "generated_jobs": 1,
                                  "generated_clusters": ["h100-leafspine-1to1", "clos3-256"]})
    presets = tuple(load_topology(name) for name in config.generated_clusters)
    rng = np.random.default_rng(0)
    seeds = [draw_generated(config, rng, presets).seed for _ in range(2000)]
    assert all(0 <= s < 2**31 for s in seeds)
    env = DeepShareEnv({"generated_fraction": 1.0, "generated_jobs": 4, "generated_clusters": ["gb200-nvl72-4"]})
    for seed in (0, 2**31 - 1, 2**40):  # env seeds anywhere: the trace seed stays below 2^31
        env.reset(seed=seed)
        assert env.generated_episode.seed < 2**31


@pytest.mark.parametrize("field, value", [
    ("generated_clusters", ["no-such-preset"]),
    ("generated_clusters", 7),
    ("generated_jobs_per_node", 0),
    ("generated_jobs_per_node", 2.5),
    ("generated_demand", "8:x"),
    ("generated_demand", "1024:1"),  # larger than every generated cluster
    ("generated_required_level", "leaf"),  # without its share
    ("generated_required_share", 0.3),  # without its level
    ("generated_preferred_share", 0.4),
    ("generated_duration_sigma", -1.0),
    ("generators", ["no-such-placement"]),
    ("generators", []),
])
def test_each_bad_new_field_is_an_error_naming_it(field, value):
    with pytest.raises(DeepShareError, match=field):
        EnvConfig.from_dict({"generated_clusters": ["h100-leafspine-1to1"], field: value})


@pytest.mark.parametrize("values, field", [
    ({"generated_required_level": "rackz", "generated_required_share": 0.3}, "generated_required_level"),
    ({"generated_preferred_level": "leaf", "generated_preferred_share": 1.5}, "generated_preferred_share"),
    ({"generated_required_level": "leaf", "generated_required_share": 0.7,
      "generated_preferred_level": "leaf", "generated_preferred_share": 0.7}, "generated_required_share"),
    ({"generated_demand": "128:1", "generated_clusters": []}, "generated_demand"),  # 4 x 8 GPUs is too small
])
def test_requests_and_demand_are_checked_against_the_clusters(values, field):
    with pytest.raises(DeepShareError, match=field):
        EnvConfig.from_dict({"generated_clusters": ["h100-leafspine-1to1"], "generated_nodes": [4], **values})


def test_new_fields_at_their_defaults_keep_the_encoding_and_the_draws():
    config = EnvConfig.from_dict({})
    assert config.encoding == EncodingConfig(anchor=config.anchor)
    assert config.generated_clusters == () and config.generated_jobs_per_node is None


def test_an_episode_on_a_fabric_preset_steps_to_its_end(spec):
    env = DeepShareEnv(suite_env(spec, generated_clusters=["h100-leafspine-2to1"], generated_jobs_per_node=1,
                                 generators=list(TOPO_GENERATORS), anchor=["srsf", "topo-aware"]))
    env.set_max_jobs(24)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=5)
    assert info["jobs"] == 24 and info["nodes"] == 64
    steps, done = 0, False
    while not done:
        action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.isfinite(reward) and "invalid_action" not in info
        steps += 1
        done = terminated or truncated
    assert terminated and steps > 1
    assert info["report"]["finished"] + info["report"]["rejected"] == 24


def test_the_shipped_fabric_config_draws_the_suites_episodes(spec):
    env = load_train_config(FABRIC_CONFIG).env_config(FABRIC_CONFIG.parent)
    assert env.generated_fraction == 1.0 and not env.traces
    assert env.generated_clusters == tuple(spec.fabrics)
    assert env.generated_jobs_per_node == spec.jobs_per_node
    assert set(spec.loads) <= set(env.generated_loads)
    assert env.generated_mixes == tuple(spec.mixes)
    assert (env.generated_demand, env.generated_duration_sigma) == (spec.demand, spec.duration_sigma)
    assert (env.generated_required_level, env.generated_required_share) == (spec.required_level, spec.required_share)
    assert (env.generated_preferred_level, env.generated_preferred_share) == (spec.preferred_level, spec.preferred_share)
    assert (env.contention, env.durations, env.estimate_errors) == (spec.contention[0], tuple(spec.durations),
                                                                     (spec.estimate_error,))
    assert env.encoding.generators == TOPO_GENERATORS and env.anchor == ("srsf", "topo-aware")


def test_generators_round_trip_through_a_policy_file(tmp_path):
    pytest.importorskip("torch")
    from deepshare.policies.checkpoint import export_scorer, scorer_from_file
    from deepshare.policies.scorer_net import CandidateScorer

    for generators, expected in ((list(TOPO_GENERATORS), TOPO_GENERATORS), (None, EncodingConfig().generators)):
        encoding = EnvConfig.from_dict({"generators": generators}).encoding
        assert encoding.generators == expected
        path = tmp_path / f"policy-{len(expected)}.pt"
        export_scorer(CandidateScorer(len(encoding.features), 8), encoding, path, {"config": "test"})
        _, loaded, _ = scorer_from_file(path)
        assert loaded.generators == expected and loaded == encoding
