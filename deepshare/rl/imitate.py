"""Behaviour cloning: fit the candidate scorer to imitate the anchor heuristic (``srsf+packed``).

Issue 13 asks that "at the least the network must be able to imitate the strongest heuristic".
The encoding offers the anchor's next launch as row 1 of every choice where it would launch one;
this module checks that a scorer can learn to pick it, and gives PPO a warm start:

1. :func:`collect` plays :class:`~deepshare.rl.env.DeepShareEnv` episodes (the training YAML's
   env, seeds from the training range, never the suite's >= 2^31) where every choice is the
   anchor's: the row holding its next launch (found by job and GPUs, and checked to be row 1),
   or wait when it would launch nothing. The episode is then ``srsf+packed``'s schedule exactly
   (``tests/rl/test_imitate.py`` checks the average JCT against the simulator running the
   heuristic). Each choice is stored as (observation rows, action mask, demonstrated row).
2. :func:`fit` trains a :class:`~deepshare.policies.scorer_net.CandidateScorer` by cross-entropy
   over its masked logits (Adam, shuffled minibatches), holding out whole episodes, and reports
   accuracy: how often the best-scoring unmasked row is the demonstrated one.
3. :func:`imitate` does both from a training YAML and exports ``OUT/policy.pt`` with
   :func:`~deepshare.policies.checkpoint.export_scorer` (the format of ``rl_base.pt``; its
   metadata says it was imitation-trained, on what and for how long) and ``OUT/imitation.json``.

The scorer scores each row alone (no row index among its inputs), so it has to recognise the
anchor's launch from the row's features (remaining time, GPUs, nodes per GPU, waiting time...),
not from its position: accuracy below 1 measures what the features do not tell it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.json_text import json_text
from deepshare.policies.encoding import ANCHOR_ROW, WAIT_INDEX, Candidate, PartialDecision, anchor_launch
from deepshare.policies.learned import best_row
from deepshare.rl.env import DeepShareEnv, EnvConfig

SUITE_SEED_BASE = 2**31
"""Episode seeds stay below it: the benchmark suite's traces use seeds from here up
(``deepshare.experiments.suite.SUITE_SEED_BASE``, a layer above this one; a test keeps them equal)."""


@dataclass
class Demonstrations:
    """Choices of anchor-driven episodes, stacked: ``observations`` [N, K, F] float32, ``masks``
    [N, K] float32, ``actions`` [N] int64 (the demonstrated row), ``episodes`` [N] (index of the
    episode each choice came from)."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    episodes: np.ndarray
    rounds: np.ndarray | None = None
    """[N]: the collection round of each choice (0: the anchor's own episodes; r > 0: DAgger
    round r, driven by the scorer fitted so far); None: all round 0."""
    seeds: list[int] = field(default_factory=list)
    """The env seed of each episode, in order."""
    avg_jct_s: list[float] = field(default_factory=list)
    """Each episode's average JCT (the env's final report)."""
    forced: int = 0
    """Choices where the anchor would wait but waiting was masked (the cluster was wholly idle
    and a job fit): not stored (the label is no row the scorer may take); on the anchor's own
    episodes the env then launched its first row, leaving the heuristic's schedule. The shipped
    anchors (``packed``, ``uncontended``) launch a fitting job on an idle cluster, so none is
    forced unless ``max_wait_s`` masks wait."""

    def __len__(self) -> int:
        return len(self.actions)

    def round_of_each(self) -> np.ndarray:
        return self.rounds if self.rounds is not None else np.zeros(len(self.actions), dtype=np.int64)

    def extended(self, other: "Demonstrations", round_index: int) -> "Demonstrations":
        """These choices and ``other``'s (as round ``round_index``, episodes numbered after ours)."""
        offset = int(self.episodes.max()) + 1 if len(self) else 0
        return Demonstrations(
            np.concatenate([self.observations, other.observations]), np.concatenate([self.masks, other.masks]),
            np.concatenate([self.actions, other.actions]), np.concatenate([self.episodes, other.episodes + offset]),
            np.concatenate([self.round_of_each(), np.full(len(other), round_index, dtype=np.int64)]),
            self.seeds + other.seeds, self.avg_jct_s + other.avg_jct_s, self.forced + other.forced,
        )

    @property
    def wait_share(self) -> float:
        return float(np.mean(self.actions == WAIT_INDEX)) if len(self) else 0.0


def anchor_action(partial: PartialDecision, rows: list[Candidate], anchor: tuple[str, ...]) -> int:
    """The row holding the anchor heuristic's next launch on ``partial``, or wait (row 0) when it
    would launch nothing. Raises RuntimeError when the encoding did not offer the pick as row 1
    (the encoding's promise this module relies on)."""
    pick = anchor_launch(partial, anchor)
    if pick is None:
        return WAIT_INDEX
    job, placement = pick
    for row, c in enumerate(rows):
        if c.job is not None and c.job.job_id == job.job_id and c.placement.alloc == placement.alloc:  # type: ignore[union-attr]
            if row != ANCHOR_ROW:
                raise RuntimeError(f"the anchor's launch of {job.job_id} is row {row}, expected row {ANCHOR_ROW}")
            return row
    raise RuntimeError(f"the anchor's launch of {job.job_id} on {placement.alloc} is not among the {len(rows)} rows")


def collect(
    env_config: EnvConfig,
    episodes: int,
    seed_base: int = 0,
    progress: Callable[[int, int, int], None] | None = None,
    driver: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
) -> Demonstrations:
    """Play ``episodes`` episodes with env seeds ``seed_base ..``; their choices, each labelled
    with the anchor's row.

    Without ``driver`` the anchor's rows are also the actions taken (its own schedule). With a
    ``driver`` (a scorer: observation -> row scores) the episode follows the driver's best row
    while the labels stay the anchor's: DAgger's data, the states a learner reaches by its own
    mistakes, with what the heuristic would have done there. The env's safety net is switched
    off (on the anchor's own episodes it only meets waits the anchor chose because it had
    nothing to launch). ``progress(done, total, choices)`` after each episode."""
    if env_config.anchor is None:
        raise DeepShareError("imitate: the env's anchor is null; the anchor heuristic's launch must be offered to imitate it")
    if episodes < 1:
        raise DeepShareError(f"imitate: episodes must be positive, got {episodes}")
    if not 0 <= seed_base or seed_base + episodes > SUITE_SEED_BASE:
        raise DeepShareError(f"imitate: episode seeds must lie in [0, 2^31) (the suite's traces use seeds >= 2^31); "
                             f"got {seed_base}..{seed_base + episodes - 1}")
    env = DeepShareEnv(replace(env_config, hybrid=False))
    anchor = env_config.anchor
    obs_rows: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    actions: list[int] = []
    owner: list[int] = []
    demos = Demonstrations(np.empty(0), np.empty(0), np.empty(0), np.empty(0))
    for episode in range(episodes):
        seed = seed_base + episode
        obs, _ = env.reset(seed=seed)
        done, info = False, {}
        while not done:
            partial, rows = env.choice()
            action = anchor_action(partial, rows, anchor)
            if obs["action_mask"][action] == 0:
                demos.forced += 1  # not a row the scorer may take: no label to learn here
            else:
                obs_rows.append(obs["observations"].copy())
                masks.append(obs["action_mask"].copy())
                actions.append(action)
                owner.append(episode)
            taken = action if driver is None else best_row(driver(obs), obs["action_mask"])
            obs, _, terminated, truncated, info = env.step(taken)
            done = terminated or truncated
        demos.seeds.append(seed)
        demos.avg_jct_s.append(float(info["report"]["avg_jct_s"]) if "report" in info else float("nan"))
        if progress is not None:
            progress(episode + 1, episodes, len(actions))
    k, f = env.observation_space["observations"].shape
    demos.observations = np.stack(obs_rows) if obs_rows else np.zeros((0, k, f), np.float32)
    demos.masks = np.stack(masks) if masks else np.zeros((0, k), np.float32)
    demos.actions = np.asarray(actions, dtype=np.int64)
    demos.episodes = np.asarray(owner, dtype=np.int64)
    return demos


@dataclass(frozen=True)
class FitSettings:
    """How :func:`fit` trains (the defaults are ``deepshare imitate``'s, the ones measured in
    ``CHANGELOG.md``)."""

    hidden: int = 64
    epochs: int = 30
    batch_size: int = 256
    lr: float = 2e-3
    held_out: float = 0.2
    """Share of the episodes (the last ones) kept out of training to measure accuracy."""
    seed: int = 0
    label_smoothing: float = 0.0
    """Share of each target spread evenly over the choice's unmasked rows. 0: plain cross-entropy,
    which drives an exact imitation's probabilities to 1, so PPO started from it samples only the
    imitated choice and learns nothing; a little smoothing leaves it room to explore while the
    best row (what a deployed policy takes) stays the demonstrated one."""


@dataclass
class FitReport:
    train_choices: int
    held_out_choices: int
    train_accuracy: float
    held_out_accuracy: float
    """Share of held-out choices whose best unmasked row is the demonstrated one (nan: none held
    out); with DAgger rounds, over every round's held-out episodes."""
    held_out_wait_accuracy: float
    """The same over the held-out choices where the anchor waited."""
    losses: list[float]
    """Mean training cross-entropy of each epoch."""
    seconds: float


def accuracy(net: Any, observations: np.ndarray, masks: np.ndarray, actions: np.ndarray, batch: int = 4096) -> float:
    """Share of choices whose highest-scoring unmasked row (the first of equals, as
    :func:`deepshare.policies.learned.best_row`) is the demonstrated one; nan on none."""
    import torch

    if len(actions) == 0:
        return float("nan")
    hits = 0
    with torch.no_grad():
        for start in range(0, len(actions), batch):
            logits, _ = net(torch.from_numpy(observations[start:start + batch]), torch.from_numpy(masks[start:start + batch]))
            hits += int((logits.argmax(-1).numpy() == actions[start:start + batch]).sum())
    return hits / len(actions)


def held_out_rows(demos: Demonstrations, share: float) -> np.ndarray:
    """[N] bool: the choices of the last ``share`` of each round's episodes (whole episodes, so
    no held-out choice shares an episode with a training one; none when a round has one episode).
    A round's first episode is always fitted on: a share that rounds to all of them (``--held-out
    0.8`` of 2 episodes) held every choice out, and the exported scorer was its untrained start."""
    held = np.zeros(len(demos), dtype=bool)
    rounds = demos.round_of_each()
    for r in np.unique(rounds):
        in_round = rounds == r
        episodes = np.unique(demos.episodes[in_round])
        kept = max(1, len(episodes) - int(round(share * len(episodes))))
        held |= in_round & np.isin(demos.episodes, episodes[kept:])
    return held


def fit(
    demos: Demonstrations,
    settings: FitSettings = FitSettings(),
    progress: Callable[[int, int, float], None] | None = None,
    start: Any = None,
):
    """A :class:`CandidateScorer` fitted to ``demos`` (from ``start``'s weights when given: a
    DAgger round continues the last fit); returns ``(net, FitReport)``. Runs torch on
    one thread: for a network this small an intra-op pool costs more than it saves (3x the CPU
    time for the same fit on the shared 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _fit(demos, settings, progress, start)
    finally:
        torch.set_num_threads(threads)


def _fit(demos: Demonstrations, settings: FitSettings, progress: Callable[[int, int, float], None] | None, start: Any):
    import torch

    from deepshare.policies.scorer_net import CandidateScorer

    if len(demos) == 0:
        raise DeepShareError("imitate: no choices to learn from")
    if not 0 <= settings.held_out < 1:
        raise DeepShareError(f"imitate: held_out must be in [0, 1), got {settings.held_out}")
    if not 0 <= settings.label_smoothing < 1:
        raise DeepShareError(f"imitate: label_smoothing must be in [0, 1), got {settings.label_smoothing}")
    began = time.process_time()
    torch.manual_seed(settings.seed)
    train_rows = ~held_out_rows(demos, settings.held_out)
    obs, mask, act = demos.observations, demos.masks, demos.actions
    x, m, y = (torch.from_numpy(a[train_rows]) for a in (obs, mask, act))
    net = CandidateScorer(obs.shape[-1], settings.hidden)  # the encoding's columns, extras included
    if start is not None:
        net.load_state_dict(start.state_dict())
    optimiser = torch.optim.Adam(net.parameters(), lr=settings.lr)
    generator = torch.Generator().manual_seed(settings.seed)
    losses = []
    for epoch in range(settings.epochs):
        order = torch.randperm(len(y), generator=generator)
        total = 0.0
        for start in range(0, len(y), settings.batch_size):
            idx = order[start:start + settings.batch_size]
            logits, _ = net(x[idx], m[idx])
            loss = imitation_loss(logits, m[idx], y[idx], settings.label_smoothing)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        losses.append(total / max(1, len(y)))
        if progress is not None:
            progress(epoch + 1, settings.epochs, losses[-1])
    net.eval()
    held = ~train_rows
    held_wait = held & (act == WAIT_INDEX)
    report = FitReport(
        train_choices=int(train_rows.sum()), held_out_choices=int(held.sum()),
        train_accuracy=accuracy(net, obs[train_rows], mask[train_rows], act[train_rows]),
        held_out_accuracy=accuracy(net, obs[held], mask[held], act[held]),
        held_out_wait_accuracy=accuracy(net, obs[held_wait], mask[held_wait], act[held_wait]),
        losses=losses, seconds=time.process_time() - began,
    )
    return net, report


def imitation_loss(logits: Any, mask: Any, target: Any, smoothing: float) -> Any:
    """Cross-entropy of the masked ``logits`` [B, K] against the demonstrated rows ``target`` [B],
    with ``smoothing`` of each target spread over that choice's unmasked rows (masked rows get
    none: their logits are the network's large negative constant)."""
    import torch

    if smoothing == 0:
        return torch.nn.functional.cross_entropy(logits, target)
    valid = mask > 0
    soft = valid.to(logits.dtype) * (smoothing / valid.sum(-1, keepdim=True))
    soft[torch.arange(len(target)), target] += 1.0 - smoothing
    logp = torch.log_softmax(logits, -1).masked_fill(~valid, 0.0)
    return -(soft * logp).sum(-1).mean()


def learner_gap(env: EnvConfig, net: Any, episodes: int, seed_base: int) -> tuple[Demonstrations, float]:
    """``net`` driving ``episodes`` episodes (seeds ``seed_base ..``), labelled by the anchor, and
    its average JCT over the anchor's own on the same seeds (geometric mean of the per-episode
    ratios): how far the imitation is from the heuristic where it counts, in its own states."""
    from deepshare.policies.checkpoint import TorchScorer

    own = collect(env, episodes, seed_base, driver=TorchScorer(net))
    anchor = collect(env, episodes, seed_base)
    ratios = np.asarray(own.avg_jct_s) / np.asarray(anchor.avg_jct_s)
    return own, float(np.exp(np.mean(np.log(ratios))))


def imitate(
    config_path: str | Path,
    out: str | Path,
    *,
    episodes: int = 192,
    seed_base: int = 0,
    settings: FitSettings | None = None,
    dagger_rounds: int = 3,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Collect demonstrations on the env of the training YAML at ``config_path``, fit, then for
    each of ``dagger_rounds`` let the fitted scorer drive ``episodes`` new episodes, label its
    states with the anchor's rows, add them and fit again (DAgger: the states a learner reaches
    by its own mistakes are the ones plain imitation never shows it); export ``OUT/policy.pt``
    and ``OUT/imitation.json``; returns the policy file. Episode seeds are ``seed_base`` onwards,
    ``episodes`` per round and ``episodes`` more to measure the final scorer, all below 2^31.
    ``settings.hidden`` defaults to the YAML's ``model.hidden``."""
    from deepshare.policies.checkpoint import export_scorer
    from deepshare.rl.train import load_train_config

    config = load_train_config(config_path)
    env = config.env_config(Path(config_path).parent)
    settings = settings or FitSettings(hidden=config.model.hidden)
    say = log or (lambda _msg: None)
    last_seed = seed_base + episodes * (dagger_rounds + 2) - 1
    if last_seed >= SUITE_SEED_BASE:
        raise DeepShareError(f"imitate: episode seeds {seed_base}..{last_seed} reach 2^31 (the suite's traces); "
                             "lower the seed base, the episodes or the rounds")
    began = time.process_time()
    demos = collect(env, episodes, seed_base,
                    lambda done, n, choices: say(f"episode {done}/{n}: {choices} choices so far"))
    collect_s = time.process_time() - began
    say(f"collected {len(demos)} choices from {episodes} episodes ({collect_s:.0f} CPU s; "
        f"wait demonstrated at {demos.wait_share:.1%}, forced launches {demos.forced})")
    demonstrated_jct = float(np.mean(demos.avg_jct_s))
    net, report = fit(demos, settings, lambda e, n, loss: say(f"epoch {e}/{n}: cross-entropy {loss:.4f}"))
    say(f"accuracy: train {report.train_accuracy:.4f}, held-out {report.held_out_accuracy:.4f} "
        f"(held-out waits {report.held_out_wait_accuracy:.4f}); fit {report.seconds:.0f} CPU s")
    rounds = [{"round": 0, "choices": len(demos), "held_out_accuracy": report.held_out_accuracy,
               "fit_cpu_s": report.seconds}]
    for r in range(1, dagger_rounds + 1):
        t = time.process_time()
        own, gap = learner_gap(env, net, episodes, seed_base + r * episodes)
        rounds[-1]["learner_over_anchor_avg_jct"] = gap
        say(f"DAgger round {r}: the scorer's own episodes average {gap:.4f}x the anchor's JCT; "
            f"adding {len(own)} labelled choices")
        demos = demos.extended(own, r)
        net, report = fit(demos, settings, start=net)
        say(f"  refit on {len(demos)} choices: held-out accuracy {report.held_out_accuracy:.4f} "
            f"(waits {report.held_out_wait_accuracy:.4f}); {time.process_time() - t:.0f} CPU s")
        rounds.append({"round": r, "choices": len(demos), "held_out_accuracy": report.held_out_accuracy,
                       "fit_cpu_s": report.seconds})
    _, gap = learner_gap(env, net, episodes, seed_base + (dagger_rounds + 1) * episodes)
    rounds[-1]["learner_over_anchor_avg_jct"] = gap
    say(f"final scorer: its own episodes average {gap:.4f}x the anchor's JCT (fresh seeds)")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    summary = {
        "trainer": "imitation (behaviour cloning" + (f", {dagger_rounds} DAgger rounds)" if dagger_rounds else ")"),
        "imitates": "+".join(env.anchor or ()),
        "config": str(config_path), "name": config.name, "env": asdict(env),
        "episodes": episodes, "dagger_rounds": dagger_rounds, "episode_seeds": [seed_base, last_seed],
        "choices": len(demos), "wait_share": demos.wait_share, "forced_launches": demos.forced,
        "demonstrated_avg_jct_s": demonstrated_jct,
        "fit": asdict(settings), "model": {"hidden": settings.hidden},
        **{k: v for k, v in asdict(report).items()},
        "rounds": rounds, "learner_over_anchor_avg_jct": gap,
        "collect_cpu_s": collect_s, "total_cpu_s": time.process_time() - began,
    }
    policy = folder / "policy.pt"
    export_scorer(net, env.encoding, policy, summary)
    write_text_atomic(folder / "imitation.json", json_text(summary, default=str), "run summary")
    return policy
