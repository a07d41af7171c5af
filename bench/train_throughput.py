"""Environment throughput: the cost of one env step, and RLlib sampling with 1, 2 and 4 runners.

Prints, in one run: steps/s of a single DeepShareEnv stepped with random valid actions (no
RLlib), then for 1, 2 and 4 env runners (fractional CPUs on this machine) the env steps sampled
per second in one PPO iteration of 4,000 steps, total and per runner. Target: 2,000 env steps/s
per runner.

Usage: python bench/train_throughput.py [--config rllib_configs/rl_hybrid.yaml]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from deepshare.rl.env import DeepShareEnv
from deepshare.rl.train import build_algorithm_config, load_train_config


def raw_env(config_path: str, steps: int = 3000) -> float:
    config = load_train_config(config_path)
    env = DeepShareEnv(config.env_config(os.path.dirname(os.path.abspath(config_path))))
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(1000)))
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="rllib_configs/rl_hybrid.yaml")
    args = parser.parse_args()
    rate = raw_env(args.config)
    print(f"one env, no RLlib: {rate:,.0f} steps/s ({1000 / rate:.2f} ms per step)")

    import ray

    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp())
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024**2)
    config = load_train_config(args.config)
    env = config.env_config(os.path.dirname(os.path.abspath(args.config)))
    for runners in (1, 2, 4):
        algo = build_algorithm_config(config, env, runners, float(ray.cluster_resources()["CPU"])).build_algo()
        algo.train()  # warm-up: first episodes, JIT, worker start
        result = algo.train()
        sampled = result["env_runners"]["num_env_steps_sampled"]
        seconds = result["timers"]["env_runner_sampling_timer"]
        print(f"{runners} env runner(s): {sampled / seconds:,.0f} env steps/s in all, {sampled / seconds / runners:,.0f} per runner")
        algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
