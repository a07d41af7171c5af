"""How often the input-dependent baseline finds a partner, with and without the group's clock.

``ppo_extras.input_baseline`` compares an action's return with the returns of the other episodes
of its replay group that replay the same arrival sequence, at the same step index, *in the same
training batch*. Envs of a group step in lockstep but take different numbers of decisions per
episode, so counting their sequences on their own (``--no-clock``, as before) they drift apart by
the sum of their episodes' length differences; with the shared
:class:`~deepshare.rl.env.ReplayClock` an env ending an episode joins its group's newest sequence.

This drives ``--envs`` envs of an env runner in lockstep, as RLlib's vector env does (a finished
env resets on its next step), each taking uniformly random unmasked actions from its own seeded
generator, cuts their steps into batches of ``--fragment`` steps per env (an env runner's share of
``train_batch_size_per_learner``), and prints, per window of ``--window`` batches, the share of
steps whose (sequence, step index) another env's step shares in the batch: the learner's
``baseline_matched``. Both ways run on the same envs and actions' generators, side by side.

Usage: python bench/replay_match.py [--envs 8] [--group-size 4] [--fragment 250] [--batches 200]
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from deepshare.rl.env import DeepShareEnv, ReplayClock

ENV = {"generated_fraction": 1.0, "generated_jobs": 12, "generated_nodes": [2, 4],
       "generated_loads": [0.7, 0.9, 1.1], "durations": "estimated"}
"""Short generated episodes (12 jobs on 2-4 nodes): many episodes per batch, so drift shows soon."""


def batches_matched(envs: int, group_size: int, fragment: int, batches: int, clock: bool, seed: int) -> list[float]:
    """Per batch, the share of its steps that another step of the batch shares (sequence, index) with."""
    subs = [DeepShareEnv(ENV) for _ in range(envs)]
    clocks: dict[int, ReplayClock] = {}
    for i, env in enumerate(subs):
        group = i // group_size
        env.set_replay_group(seed, 0, group, clocks.setdefault(group, ReplayClock()) if clock else None)
    actions = [np.random.default_rng([seed, i]) for i in range(envs)]
    state = []
    for env in subs:
        obs, info = env.reset()
        state.append([obs["action_mask"], info["sequence"], 0])
    shares = []
    for _ in range(batches):
        keys = []
        for _ in range(fragment):
            for i, env in enumerate(subs):
                mask, sequence, t = state[i]
                keys.append((sequence, t))
                action = int(actions[i].choice(np.flatnonzero(mask)))
                obs, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    obs, info = env.reset()
                    state[i] = [obs["action_mask"], info["sequence"], 0]
                else:
                    state[i] = [obs["action_mask"], sequence, t + 1]
        counts = Counter(keys)
        shares.append(sum(1 for k in keys if counts[k] > 1) / len(keys))
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--fragment", type=int, default=250, help="steps per env in one training batch")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--window", type=int, default=20, help="batches per printed row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.envs % args.group_size or args.group_size < 2:
        parser.error("--group-size must be 2 or more and divide --envs")
    ways = {name: batches_matched(args.envs, args.group_size, args.fragment, args.batches, clock, args.seed)
            for name, clock in (("own count", False), ("group clock", True))}
    print(f"{args.envs} envs in groups of {args.group_size}, {args.fragment} steps per env a batch, seed {args.seed}: "
          "share of steps with a partner in their batch")
    print(f"{'batches':>12} | " + " | ".join(f"{name:>11}" for name in ways))
    for start in range(0, args.batches, args.window):
        end = min(args.batches, start + args.window)
        row = [float(np.mean(shares[start:end])) for shares in ways.values()]
        print(f"{start + 1:>5}-{end:<6} | " + " | ".join(f"{value:>11.3f}" for value in row))
    print(f"{'all':>12} | " + " | ".join(f"{float(np.mean(s)):>11.3f}" for s in ways.values()))


if __name__ == "__main__":
    main()
