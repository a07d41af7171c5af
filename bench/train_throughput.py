"""Environment throughput: one env step, then RLlib sampling per env runner, on one node and on a
fake multi-node cluster.

Prints, in one run:

1. steps/s and CPU ms per step of a single DeepShareEnv stepped with random valid actions (no RLlib);
2. one env runner in this process: CPU ms per env step with RLlib's default connectors vs
   :mod:`deepshare.rl.connectors`, and with 4 vs 16 envs per runner, side by side, and which of
   these is cheapest next to what the config sets (the shipped configs set 16);
3. on a local Ray (all cores), for 1, 2 and 4 env runners: env steps sampled per second, in all and
   per runner, next to the target of 2,000 per runner (issue 14, item 5), and each runner's CPU
   ms per env step (steadier than wall time on a loaded machine);
4. the same on a fake multi-node cluster (``ray.cluster_utils.Cluster``: NODES nodes declaring one
   CPU each, one runner per node), for 1..NODES runners: whether total throughput grows with the
   runners. The fake nodes share this machine's real cores: with 2 real cores, growth beyond 2
   runners cannot show, whatever the nodes declare.

Sampling is timed directly (every runner's ``sample()`` in parallel, after a warm-up), without the
learner's update, so the numbers are the rollout path alone: env, connectors, module forward and
episode bookkeeping.

Usage: python bench/train_throughput.py [--config rllib_configs/rl_hybrid.yaml] [--steps 2000]
       [--nodes 3] [--envs N] [--skip-in-process] [--skip-local] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from record import Record, add_json_flag

import numpy as np

from deepshare.rl.env import DeepShareEnv
from deepshare.rl.train import build_algorithm_config, load_train_config

TARGET_PER_RUNNER = 2000.0


def raw_env(config_path: str, steps: int = 3000) -> tuple[float, float]:
    """(steps/s, CPU ms per step) of one env stepped with seeded random valid actions."""
    config = load_train_config(config_path)
    env = DeepShareEnv(config.env_config(Path(os.path.abspath(config_path)).parent))
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(1000)))
    return steps / (time.perf_counter() - start), 1000 * (time.process_time() - cpu) / steps


def in_process(config_path: str, steps: int, rounds: int = 3) -> None:
    """One env runner in this process (torch on 1 thread, as Ray gives a 1-CPU runner): CPU ms per
    env step with RLlib's default connectors vs the lean ones, at 4 and 16 envs per runner,
    interleaved over ``rounds`` so that load on the machine hits every variant alike."""
    import torch
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    torch.set_num_threads(1)
    config = load_train_config(config_path)
    env = config.env_config(Path(os.path.abspath(config_path)).parent)
    shipped_envs = config.run.envs_per_env_runner
    variants = {}
    for lean, envs in ((False, 4), (True, 4), (True, 16)):
        config = with_envs(config, envs)
        runner = SingleAgentEnvRunner(config=build_algorithm_config(config, env, 1, 1.0, lean_connectors=lean),
                                      worker_index=1, num_workers=1)
        runner.sample(num_timesteps=200)  # warm-up
        variants[f"{'lean' if lean else 'default'} connectors, {envs:>2} envs"] = (runner, [])
    for _ in range(rounds):
        for runner, cpu_ms in variants.values():
            began = time.process_time()
            sampled = sum(len(e) for e in runner.sample(num_timesteps=steps))
            cpu_ms.append(1000 * (time.process_time() - began) / sampled)
    for label, (runner, cpu_ms) in variants.items():
        best = min(cpu_ms)
        print(f"in-process runner, {label}: {best:.3f} CPU ms per env step (best of {rounds}; "
              f"{1000 / best:,.0f} steps/s per CPU; target >= {TARGET_PER_RUNNER:,.0f})", flush=True)
        runner.stop()
    cheapest = min(variants, key=lambda label: min(variants[label][1]))
    print(f"in-process runner: cheapest per env step: {cheapest} "
          f"({config_path} sets envs_per_env_runner: {shipped_envs})", flush=True)


def with_envs(config, envs: int):
    """``config`` with ``run.envs_per_env_runner`` set to ``envs``, checked again as a config file
    is (an assignment is not checked: a replay group size that no longer divides the envs passed)."""
    run = {**config.run.model_dump(), "envs_per_env_runner": envs}  # a dict: the run's own checks run too
    return type(config).model_validate({**dict(config), "run": run})


def _sample_on_runner(runner, steps: int) -> tuple[int, float, int]:
    """Runs on an env runner: (env steps sampled, CPU seconds it took, torch threads)."""
    import torch

    began = time.process_time()
    episodes = runner.sample(num_timesteps=steps, random_actions=False)
    return sum(len(e) for e in episodes), time.process_time() - began, torch.get_num_threads()


def sampling(config_path: str, runners: int, cpus: float, steps: int, envs: int | None = None) -> dict[str, float]:
    """Env steps/s of ``runners`` env runners sampling ``steps`` each, in parallel, after a warm-up."""
    config = load_train_config(config_path)
    if envs is not None:
        config = with_envs(config, envs)
    env = config.env_config(Path(os.path.abspath(config_path)).parent)
    algo = build_algorithm_config(config, env, runners, cpus).build_algo()
    try:
        group = algo.env_runner_group
        group.foreach_env_runner(lambda r: _sample_on_runner(r, 200), local_env_runner=False)  # warm-up
        began = time.perf_counter()
        results = group.foreach_env_runner(lambda r: _sample_on_runner(r, steps), local_env_runner=False)
        wall = time.perf_counter() - began
    finally:
        algo.stop()
    sampled = sum(r[0] for r in results)
    return {
        "total": sampled / wall,
        "per_runner": sampled / wall / runners,
        "cpu_ms": 1000 * sum(r[1] for r in results) / sampled,
        "threads": max(r[2] for r in results),
    }


def _row(label: str, runners: int, m: dict[str, float]) -> str:
    return (
        f"{label} {runners} env runner(s): {m['total']:,.0f} env steps/s in all, {m['per_runner']:,.0f} per runner "
        f"(target >= {TARGET_PER_RUNNER:,.0f}); {m['cpu_ms']:.2f} CPU ms per env step on the runners; "
        f"torch threads {m['threads']:.0f}"
    )


def local(config_path: str, steps: int, envs: int | None, record: Record) -> None:
    import ray

    from deepshare.infra.localray import init_local_ray

    init_local_ray(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
                   object_store_memory=300 * 1024**2)
    try:
        for runners in (1, 2, 4):
            m = sampling(config_path, runners, float(ray.cluster_resources()["CPU"]), steps, envs)
            print(_row("local Ray:", runners, m), flush=True)
            record.add(f"local Ray, {runners} env runner(s): env steps/s per runner", m["per_runner"], "steps/s",
                       at_least=TARGET_PER_RUNNER, note=f"{m['total']:,.0f} in all; {m['cpu_ms']:.2f} CPU ms per step")
    finally:
        ray.shutdown()


def fake_cluster(config_path: str, steps: int, nodes: int, envs: int | None, record: Record) -> None:
    import ray
    from ray.cluster_utils import Cluster

    memory = 200 * 1024**2
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": memory,
                                                            "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1, object_store_memory=memory)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        cpus = float(ray.cluster_resources()["CPU"])
        print(f"fake cluster: {len(ray.nodes())} nodes, {cpus:.0f} declared CPUs, {os.cpu_count()} real cores "
              f"(growth beyond {os.cpu_count()} runners cannot show here)", flush=True)
        for runners in range(1, nodes + 1):
            m = sampling(config_path, runners, cpus, steps, envs)
            print(_row("fake cluster:", runners, m), flush=True)
            record.add(f"fake {nodes}-node cluster, {runners} env runner(s): env steps/s per runner", m["per_runner"], "steps/s",
                       at_least=TARGET_PER_RUNNER, note=f"{m['total']:,.0f} in all")
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="rllib_configs/rl_hybrid.yaml")
    parser.add_argument("--steps", type=int, default=2000, help="env steps each runner samples per measurement")
    parser.add_argument("--nodes", type=int, default=3, help="nodes of the fake cluster (1 CPU each)")
    parser.add_argument("--envs", type=int, default=None, help="envs per runner (default: the config's)")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-cluster", action="store_true")
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("train_throughput", args.json)
    envs = args.envs if args.envs is not None else load_train_config(args.config).run.envs_per_env_runner
    print(f"config {args.config}: Ray runners below sample {envs} envs each"
          f"{' (--envs)' if args.envs is not None else ' (its envs_per_env_runner)'}", flush=True)
    rate, cpu_ms = raw_env(args.config)
    print(f"one env, no RLlib: {rate:,.0f} steps/s ({1000 / rate:.2f} ms per step, {cpu_ms:.2f} CPU ms); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    record.add("one env, no RLlib", rate, "steps/s", note=f"{cpu_ms:.2f} CPU ms per step")
    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp())
    if not args.skip_in_process:
        in_process(args.config, args.steps)
    if not args.skip_local:
        local(args.config, args.steps, args.envs, record)
    if not args.skip_cluster:
        fake_cluster(args.config, args.steps, args.nodes, args.envs, record)
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    record.write()


if __name__ == "__main__":
    main()
