"""Seeded episodes hash to fixed values: speed-ups of the env step must not change what it produces.

Every observation, mask, reward, terminated/truncated flag, info dict (the final report too) and
reset info of a few seeded episodes, stepped with seeded random valid (and some masked) actions,
is folded into one SHA-256 per case. The expected digests were computed from the env before the
rollout speed-ups (issue 14, item 5); a mismatch means the env's output changed, not only its speed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from deepshare.rl.env import DeepShareEnv

TRACE = str(Path(__file__).resolve().parent.parent / "deepshare" / "data" / "traces" / "deepshare-train-jobset0-episode0.json")
SMALL = {"generated_fraction": 1.0, "generated_jobs": 30, "generated_nodes": [2, 4]}
CASES = {
    "generated_jct": (dict(SMALL), (0, 1, 2)),
    "generated_original_reward": ({**SMALL, "reward": "original", "reward_scale": 0.1}, (3, 4)),
    "generated_hybrid_contentions": ({**SMALL, "hybrid": True, "contentions": ["profiled", "none"]}, (5, 6)),
    "trace_hybrid_no_anchor": ({"traces": [TRACE], "hybrid": True, "anchor": None, "max_steps": 150}, (7,)),
}
EXPECTED = {
    "generated_jct": "b9be1bfd6d5a52ac365eacada0ede6740822cb117c1379281dccc98ebea73f79",
    "generated_original_reward": "f5740681a5c3128e5d0d6eb0c0a10306a719d7b4fc1cfa91ce50e0c1ff999e83",
    "generated_hybrid_contentions": "46ed0bd94cbabc8aa2c27fb1b1949a9f50a91934b7ce7ea3a9419f65f37fbad0",
    "trace_hybrid_no_anchor": "482a489a9def2fcd8996fa4cac4b5a8e71fcea81f51494cec8ed2d19a22e8819",
}


def _fold(digest, obs) -> None:
    for key in sorted(obs):
        array = np.ascontiguousarray(obs[key])
        digest.update(f"{key}:{array.dtype.str}:{array.shape}".encode())
        digest.update(array.tobytes())


def episode_digest(config: dict, seeds: tuple[int, ...]) -> str:
    """SHA-256 over every seeded episode's outputs, with actions drawn from a seeded generator."""
    env = DeepShareEnv(config)
    digest = hashlib.sha256()
    for seed in seeds:
        rng = np.random.default_rng(seed)
        obs, info = env.reset(seed=seed)
        _fold(digest, obs)
        digest.update(json.dumps(info, sort_keys=True).encode())
        done = False
        while not done:
            valid = np.flatnonzero(obs["action_mask"])
            action = int(rng.integers(len(obs["action_mask"]))) if rng.random() < 0.1 else int(rng.choice(valid))
            obs, reward, terminated, truncated, info = env.step(action)
            _fold(digest, obs)
            digest.update(f"{action}:{float(reward).hex()}:{terminated}:{truncated}".encode())
            digest.update(json.dumps(info, sort_keys=True, default=repr).encode())
            done = terminated or truncated
    return digest.hexdigest()


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeded_episodes_are_bit_identical_to_the_reference(name):
    config, seeds = CASES[name]
    assert episode_digest(config, seeds) == EXPECTED[name]
