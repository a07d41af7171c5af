"""How often the input-dependent baseline finds a partner, with and without the group's clock.

``ppo_extras.input_baseline`` compares an action's return with the returns of the other episodes
of its replay group that replay the same arrival sequence, at the same step index, *in the same
training batch*. Envs of a group step in lockstep but take different numbers of decisions per
episode, so counting their sequences on their own (``--no-clock``, as before) they drift apart by
the sum of their episodes' length differences; with the shared
:class:`~deepshare.rl.env.ReplayClock` an env starts sequence k only once its whole group has
started k - 1, playing untagged filler episodes meanwhile.

This drives ``--envs`` envs of an env runner in lockstep, as RLlib's vector env does, each taking
uniformly random unmasked actions from its own seeded generator; a finished env is reset at once
(RLlib's vector env resets it on the next vector step, a step it does not count: the same steps
in the same order). It cuts their steps into batches of ``--fragment`` steps per env (an env
runner's share of ``train_batch_size_per_learner``) and prints, per window of ``--window``
batches, the share of steps whose (sequence, step index) another env's step shares in the batch
(filler steps, untagged, count as unmatched): the learner's ``baseline_matched``; and the share of
steps in filler episodes. Both ways run on the same envs and actions' generators, side by side.

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


def batches_matched(envs: int, group_size: int, fragment: int, batches: int, clock: bool,
                    seed: int) -> list[tuple[float, float]]:
    """Per batch, (the share of its steps that another step of the batch shares (sequence, index)
    with, the share of its steps in untagged filler episodes)."""
    subs = [DeepShareEnv(ENV) for _ in range(envs)]
    clocks: dict[int, ReplayClock] = {}
    for i, env in enumerate(subs):
        group = i // group_size
        env.set_replay_group(seed, 0, group, clocks.setdefault(group, ReplayClock()) if clock else None)
    actions = [np.random.default_rng([seed, i]) for i in range(envs)]
    state = []
    for env in subs:
        obs, info = env.reset()
        state.append([obs["action_mask"], info.get("sequence"), 0])
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
                    state[i] = [obs["action_mask"], info.get("sequence"), 0]
                else:
                    state[i] = [obs["action_mask"], sequence, t + 1]
        counts = Counter(k for k in keys if k[0] is not None)
        matched = sum(1 for k in keys if k[0] is not None and counts[k] > 1)
        shares.append((matched / len(keys), sum(1 for k in keys if k[0] is None) / len(keys)))
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
          "share of steps with a partner in their batch (matched) and in filler episodes (filler)")
    columns = [f"{name}: {what}" for name in ways for what in ("matched", "filler")]
    print(f"{'batches':>12} | " + " | ".join(f"{c:>20}" for c in columns))

    def row(lo: int, hi: int) -> str:
        values = [float(np.mean([s[k] for s in shares[lo:hi]])) for shares in ways.values() for k in (0, 1)]
        return " | ".join(f"{value:>20.3f}" for value in values)

    for start in range(0, args.batches, args.window):
        end = min(args.batches, start + args.window)
        print(f"{start + 1:>5}-{end:<6} | " + row(start, end))
    print(f"{'all':>12} | " + row(0, args.batches))


if __name__ == "__main__":
    main()
