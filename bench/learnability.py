"""The learnability check (issue 37, item 2): can PPO beat its teacher where the teacher is wrong
by construction?

The family is :class:`deepshare.rl.scenarios.GangFamily`: on one 8-GPU node a short 8-GPU gang
waits for a blocker to end while a filler arrives that fits in the GPUs the blocker leaves free.
The env's anchor (``srsf+packed``, the teacher every learned policy imitates) starts the filler,
which keeps the gang out for the filler's whole run when the filler is long; waiting for the gang
is better then. Most fillers are short (then starting them is right), so the better rule is EASY
backfilling's, and "always wait" is built to fail the pass mark.

The teacher is the env's anchor, not the best registered heuristic: the registered backfill
heuristics already hold the better rule (the bench lists those that reach its figure). The check asks whether RL
can learn a rule its teacher lacks, not whether it beats every heuristic.

Steps (each prints its figures):

1. **The room.** On held-out instances (seeds from ``--eval-seed-base``): the teacher, the
   registered ``srsf+consolidated+backfill`` (the better rule; on one node ``consolidated`` places
   as ``packed`` does), every registered heuristic (best non-preemptive and best preemptive: the
   env offers no preemption, so the preemptive ones are out of the learner's reach), and two fixed
   rules played through the env's own action space: a hand rule (take the anchor's row, but wait
   while a queued job does not fit and the offered launch would outlast the next completion),
   proof that the env offers the better action, and "always wait" (wait whenever wait is offered),
   the trivial rule a learner may settle on. The room check needs the better rule >= 15% ahead of
   the teacher (ratio <= 0.85) and "always wait" to fail the pass mark (ratio > 0.90); when either
   is missed the bench says why and refuses to train (exit status 1).
2. **The check.** ``deepshare imitate`` of the teacher on the training instances, then PPO
   (``rllib_configs/learnability.yaml``) (a) from scratch and (b) from the imitation. Every
   ``run.checkpoint_every`` iterations the exported ``policy.pt`` is scored (as ``rl-base=FILE``)
   on the held-out instances: the training curve. Pass: the final policy's average JCT is at
   least 10% better than the teacher's (ratio <= 0.90), for each start; each start's verdict, why,
   and its ratio to the best non-preemptive heuristic are printed and written.

``--config`` picks the training YAML: ``rllib_configs/learnability.yaml`` (default; the network
alone, as ``rl-base`` trains) or ``rllib_configs/learnability_ppo.yaml`` (the same with
``ppo_extras``); a YAML with ``hybrid: true`` is scored as ``rl-hybrid=FILE``. Its ``env.anchor``
must be the teacher (``srsf+packed``); a curriculum whose last length is not ``3 x --rounds`` jobs
is warned about. Bad flag values (a count below 1, held-out seeds overlapping the training seeds,
an unknown or repeated ``--runs`` name) are one usage line.

Outputs go to ``--out`` (default ``runs/learnability``; a rerun replaces its PPO run folders): the
family's traces, cluster and training YAML (``family/``), the imitation (``imitate/``), the two PPO runs (``scratch/``, ``warm/``, each
with RLlib's ``metrics.csv``) and ``learnability.json`` (every figure printed, the room check, each
start's ``verdict`` and ``why`` (and ``verdicts`` for all), or ``refused``, with the run's date,
commit and machine under ``provenance``; written whole, again after the room, the imitation and
each PPO run). Nothing here asserts beyond the room check; ``tests/rl/test_learnability.py``
checks the family's construction and the bench's flags and verdicts.

Usage::

    python bench/learnability.py                      # the whole check (a few minutes on 2 free CPUs)
    python bench/learnability.py --room-only          # step 1 only (seconds)
    python bench/learnability.py --config rllib_configs/learnability_ppo.yaml --out runs/learnability_ppo
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from deepshare.core.atomic import write_text_atomic
from deepshare.core.contention import make_contention
from deepshare.core.information import InformationModel
from deepshare.core.simulator import Simulator
from deepshare.core.topology import parse_topology
from deepshare.core.traces.canonical import write_canonical
from deepshare.experiments.provenance import provenance_at_write, run_provenance
from deepshare.policies import make_policy
from deepshare.policies.registry import policy_names
from deepshare.rl.scenarios import CLUSTER_YAML, GangFamily

TEACHER = "srsf+packed"
BETTER = "srsf+consolidated+backfill"
TEMPLATE = Path(__file__).resolve().parent.parent / "rllib_configs" / "learnability.yaml"
PASS_RATIO = 0.90
ROOM_RATIO = 0.85


# -- the family on disk ------------------------------------------------------------------------
def write_family(out: Path, family: GangFamily, train_seeds: range, template: Path = TEMPLATE) -> Path:
    """The training instances as canonical traces, the cluster spec, and the training YAML (the
    template with ``env.traces`` and ``env.cluster`` filled in); returns the YAML's path."""
    folder = out / "family"
    (folder / "traces").mkdir(parents=True, exist_ok=True)
    (folder / "cluster.yaml").write_text(CLUSTER_YAML)
    traces = []
    for seed in train_seeds:
        path = folder / "traces" / f"gang-{seed:05d}.csv"
        write_canonical(family.jobs(seed), path)
        traces.append(str(path.relative_to(folder)))
    doc = yaml.safe_load(template.read_text())
    doc["env"]["traces"] = traces
    doc["env"]["cluster"] = str((folder / "cluster.yaml").resolve())  # env.cluster is not resolved against the YAML's folder
    config = folder / "train.yaml"
    config.write_text(f"# written by bench/learnability.py from {template.name}\n" + yaml.safe_dump(doc, sort_keys=False))
    return config


# -- scoring -----------------------------------------------------------------------------------
def avg_jct_h(policy_name: str, family: GangFamily, seeds: range) -> float:
    """Mean over the instances of each instance's average JCT (hours), under exact durations and no
    contention, as the env runs them."""
    topology = parse_topology(CLUSTER_YAML)
    total = 0.0
    for seed in seeds:
        sim = Simulator(topology, family.jobs(seed), make_contention("none"), information=InformationModel("exact"))
        report = sim.run(make_policy(policy_name))
        total += report.avg_jct_s / 3600.0
    return total / len(seeds)


ENV_RULES = ("hand", "anchor", "always_wait")
"""The fixed rules :func:`rules_in_env` plays through the env."""


def rules_in_env(config_path: Path, family: GangFamily, seeds: range) -> dict[str, float]:
    """Average JCT in hours of fixed rules played through :class:`DeepShareEnv` on the held-out
    instances: ``anchor`` takes row 1 (or wait when it offers none); ``hand`` takes the same row
    unless a queued job does not fit in the GPUs left and the offered launch would end after the
    next running job does (then wait, where wait is not masked); ``always_wait`` waits whenever
    wait is offered (the env never offers it on a wholly idle cluster) and otherwise takes row 1.
    ``always_wait`` is the trivial rule a learner may settle on: the family is built so that it
    fails the pass mark (see :class:`GangFamily`)."""
    from deepshare.rl.env import DeepShareEnv
    from deepshare.rl.train import load_train_config

    config = load_train_config(config_path)
    folder = config_path.parent
    traces = {}
    for seed in seeds:
        trace = folder / "eval" / f"gang-{seed:05d}.csv"
        trace.parent.mkdir(exist_ok=True)
        write_canonical(family.jobs(seed), trace)
        traces[seed] = trace
    scores: dict[str, float] = {}
    for rule in ENV_RULES:
        total = 0.0
        for seed in seeds:
            env_values = {**config.env, "traces": [str(traces[seed])], "cluster": str(folder / "cluster.yaml")}
            env = DeepShareEnv(env_values)
            obs, _ = env.reset(seed=0)
            done = False
            info: dict[str, Any] = {}
            while not done:
                mask = obs["action_mask"]
                partial, rows = env.choice()
                action = 1 if mask[1] else 0
                if rule == "always_wait" and mask[0]:
                    action = 0
                elif rule == "hand" and mask[0] and len(rows) > 1:
                    job = rows[1].job
                    free = sum(partial.free)
                    launched = {launch.job_id for launch in partial.launches}
                    blocked = any(q.gpus > free for q in partial.view.queued if q.job_id not in launched)
                    running = [r.remaining_s / max(r.ratio, 1e-9) for r in partial.view.running]
                    if blocked and running and job is not None and job.remaining_s > min(running):
                        action = 0
                obs, _, done, truncated, info = env.step(action)
                done = done or truncated
            total += info["report"]["avg_jct_s"] / 3600.0
        scores[rule] = total / len(seeds)
    return scores


def room(family: GangFamily, eval_seeds: range, config_path: Path, all_heuristics: bool) -> dict[str, Any]:
    began = time.perf_counter()
    teacher = avg_jct_h(TEACHER, family, eval_seeds)
    better = avg_jct_h(BETTER, family, eval_seeds)
    result: dict[str, Any] = {"teacher": teacher, "better": better}
    if all_heuristics:
        scores = {name: avg_jct_h(name, family, eval_seeds) for name in policy_names(heuristics_only=True)}
        plain = {n: v for n, v in scores.items() if "+preempt" not in n}
        preemptive = {n: v for n, v in scores.items() if "+preempt" in n}
        result["best_non_preemptive"] = min(plain.items(), key=lambda kv: kv[1])
        result["best_preemptive"] = min(preemptive.items(), key=lambda kv: kv[1])
        result["non_backfill_non_preemptive_best"] = min(
            ((n, v) for n, v in plain.items() if "+backfill" not in n), key=lambda kv: kv[1])
        # the teacher is the env's anchor, not the best heuristic: how many reach the better rule
        result["non_preemptive_at_better"] = sorted(n for n, v in plain.items() if v <= better * (1 + 1e-9))
    played = rules_in_env(config_path, family, eval_seeds)
    result["hand_rule_env"] = played["hand"]
    result["anchor_env"] = played["anchor"]
    result["always_wait_env"] = played["always_wait"]
    result["seconds"] = time.perf_counter() - began
    result["check"] = room_check(result)
    return result


def room_check(r: dict[str, Any]) -> dict[str, Any]:
    """Whether the family, on these held-out instances, can tell learning the rule from not: the
    better rule at least 15% ahead of the teacher (ratio <= :data:`ROOM_RATIO`), and "always wait"
    (played through the env) failing the pass mark (ratio > :data:`PASS_RATIO`), or a learner that
    settled on waiting would pass. The bench refuses to train when either is missed."""
    better, always = r["better"] / r["teacher"], r["always_wait_env"] / r["teacher"]
    problems = []
    if better > ROOM_RATIO:
        problems.append(f"the better rule {BETTER} is {better:.3f}x the teacher, above the room mark {ROOM_RATIO}")
    if always <= PASS_RATIO:
        problems.append(f"'always wait' (through the env) is {always:.3f}x the teacher, within the pass mark "
                        f"{PASS_RATIO}: a policy that always waits would pass")
    return {"better_ratio": better, "always_wait_ratio": always, "ok": not problems, "problems": problems}


# -- training ----------------------------------------------------------------------------------
def learned_name(config_path: Path) -> str:
    """How a policy.pt of this config is served: ``rl-hybrid`` when it trained with the safety net
    in the loop (its file records the net's rules), else ``rl-base`` (the network alone)."""
    from deepshare.rl.train import load_train_config

    return "rl-hybrid" if load_train_config(config_path).env.get("hybrid") else "rl-base"


def run_ppo(config_path: Path, out: Path, family: GangFamily, eval_seeds: range, teacher: float, *,
            iterations: int, seed: int, init_from: Path | None) -> dict[str, Any]:
    """One PPO run; every export is scored on the held-out instances (the curve)."""
    from deepshare.rl.train import load_train_config, train, with_init_from

    config = load_train_config(config_path)
    config = config.model_copy(update={"run": config.run.model_copy(update={"seed": seed})})
    if init_from is not None:
        config = with_init_from(config, init_from)
    kind = learned_name(config_path)
    curve: list[dict[str, float]] = []
    returns: dict[int, dict[str, float]] = {}
    began = time.perf_counter()

    def progress(iteration: int, total: int, row: dict[str, float]) -> None:
        returns[iteration] = row
        print(f"    iter {iteration:3d}/{total}: return {row['episode_return_mean']:.4f}  entropy {row['entropy']:.3f}"
              f"  ({row['wall_s']:.1f} s)", flush=True)

    def on_export(iteration: int, policy: Path, row: dict[str, float] | None) -> None:
        score = avg_jct_h(f"{kind}={policy}", family, eval_seeds)
        point = {"iteration": iteration, "held_out_avg_jct_h": score, "ratio": score / teacher,
                 "return": (row or {}).get("episode_return_mean", math.nan), "wall_s": time.perf_counter() - began}
        curve.append(point)
        print(f"    export {iteration:3d}: held-out avg JCT {score:.3f} h = {score / teacher:.3f}x teacher", flush=True)

    shutil.rmtree(out, ignore_errors=True)  # the bench's own run folder: a rerun replaces it (train refuses to mix runs)
    policy = train(config_path, out, iterations=iterations, config=config, progress=progress, on_export=on_export)
    wall = time.perf_counter() - began
    final = curve[-1]
    return {"policy": str(policy), "iterations": iterations, "wall_s": wall, "final_ratio": final["ratio"],
            "final_avg_jct_h": final["held_out_avg_jct_h"], "best_ratio": min(p["ratio"] for p in curve),
            "curve": curve, "returns": {str(k): v["episode_return_mean"] for k, v in returns.items()},
            "entropy": {str(k): v["entropy"] for k, v in returns.items()}}


def run_imitation(config_path: Path, out: Path, episodes: int, smoothing: float) -> tuple[Path, float]:
    from deepshare.rl.imitate import FitSettings, imitate
    from deepshare.rl.train import load_train_config

    hidden = load_train_config(config_path).model.hidden
    began = time.perf_counter()
    policy = imitate(config_path, out, episodes=episodes, dagger_rounds=1,
                     settings=FitSettings(hidden=hidden, label_smoothing=smoothing), log=lambda m: None if m.startswith("episode") else print("    " + m))
    return policy, time.perf_counter() - began


# -- main --------------------------------------------------------------------------------------
def save(out: Path, result: dict[str, Any]) -> None:
    """``out/learnability.json``, written whole (a temporary file and a rename), its commit read
    again now (:func:`provenance_at_write`: a checkout that changed during the run is recorded
    dirty, and stays so in ``result`` for the next write; the run's own files are no change)."""
    result["provenance"] = provenance_at_write(result["provenance"], outputs=[out])
    write_text_atomic(out / "learnability.json", json.dumps(result, indent=2) + "\n", "learnability.json")


RUNS = ("scratch", "warm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, checked: a bad value is one usage line (``parser.error``), before anything runs.
    ``args.runs`` comes back as a list of start names."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learnability"))
    parser.add_argument("--config", type=Path, default=TEMPLATE,
                        help="the training YAML template (env.traces and env.cluster are filled in; env.anchor "
                             f"must be the teacher, {TEACHER})")
    parser.add_argument("--train-seeds", type=int, default=64, help="training instances: seeds 0..N-1")
    parser.add_argument("--eval-seeds", type=int, default=32, help="held-out instances")
    parser.add_argument("--eval-seed-base", type=int, default=100_000,
                        help="the first held-out seed (at least --train-seeds: no overlap with training)")
    parser.add_argument("--rounds", type=int, default=GangFamily.rounds, help="rounds (3 jobs each) per instance")
    parser.add_argument("--iterations", type=int, default=25, help="PPO iterations per run")
    parser.add_argument("--seed", type=int, default=0, help="PPO seed")
    parser.add_argument("--imitate-episodes", type=int, default=64)
    parser.add_argument("--label-smoothing", type=float, default=0.1,
                        help="the imitation's label smoothing (0: an exact imitation PPO cannot move)")
    parser.add_argument("--room-only", action="store_true", help="step 1 only: no training")
    parser.add_argument("--all-heuristics", action=argparse.BooleanOptionalAction, default=True,
                        help="score every registered heuristic in step 1")
    parser.add_argument("--runs", default="scratch,warm", help="which PPO starts to run (scratch, warm; comma-separated)")
    args = parser.parse_args(argv)
    for flag in ("train_seeds", "eval_seeds", "rounds", "iterations", "imitate_episodes"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.eval_seed_base < 0:
        parser.error(f"--eval-seed-base must be at least 0, got {args.eval_seed_base}")
    if args.eval_seed_base < args.train_seeds:
        parser.error(f"--eval-seed-base {args.eval_seed_base} overlaps the training seeds 0..{args.train_seeds - 1}: "
                     f"the held-out instances must not be trained on")
    runs = [name.strip() for name in args.runs.split(",")]
    unknown = [name for name in runs if name not in RUNS]
    if unknown:
        parser.error(f"--runs names {', '.join(map(repr, unknown))}: the starts are {', '.join(RUNS)}")
    if len(set(runs)) < len(runs):
        parser.error(f"--runs names a start twice: {args.runs!r}")
    args.runs = runs
    try:
        doc = yaml.safe_load(args.config.read_text())
    except OSError as e:
        parser.error(f"--config {args.config}: {e.strerror or e}")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        parser.error(f"--config {args.config}:{where}: not YAML ({getattr(e, 'problem', None) or str(e).splitlines()[0]})")
    if not isinstance(doc, dict):
        parser.error(f"--config {args.config}: expected a training YAML (a mapping with env, ppo, ...), got {type(doc).__name__}")
    env = doc.get("env")
    anchor = env.get("anchor", ["srsf", "packed"]) if isinstance(env, dict) else None
    anchor_name = "+".join(map(str, anchor)) if isinstance(anchor, list) else str(anchor)
    if anchor_name != TEACHER:
        parser.error(f"--config {args.config}: env.anchor is {anchor_name}, not the teacher {TEACHER} the check measures")
    extras = doc.get("ppo_extras")
    curriculum = extras.get("curriculum") if isinstance(extras, dict) else None
    lengths = curriculum.get("lengths") if isinstance(curriculum, dict) else None  # bad shapes: train refuses them
    if isinstance(lengths, list) and lengths and lengths[-1] != 3 * args.rounds:
        print(f"warning: --config {args.config}: the curriculum's lengths {lengths} end at {lengths[-1]} jobs, but "
              f"--rounds {args.rounds} makes episodes of {3 * args.rounds}", file=sys.stderr)
    return args


def verdict(run: dict[str, Any], room_figures: dict[str, Any]) -> tuple[str, str]:
    """PASS or FAIL for one PPO start, and why."""
    ratio = run["final_ratio"]
    passed = ratio <= PASS_RATIO
    if passed:
        why = f"final held-out ratio {ratio:.3f} <= {PASS_RATIO}: at least 10% better than the teacher"
    else:
        why = f"final held-out ratio {ratio:.3f} > {PASS_RATIO}: less than 10% better than the teacher"
    always = room_figures["always_wait_env"] / room_figures["teacher"]
    if abs(ratio - always) < 1e-3:
        why += f" (it scores as 'always wait' does, {always:.3f})"
    return ("PASS" if passed else "FAIL"), why


def main() -> None:
    args = parse_args()
    provenance = run_provenance(["python", *sys.argv])  # taken at the start: the load the run met

    family = GangFamily(rounds=args.rounds)
    out = args.out.resolve()
    eval_seeds = range(args.eval_seed_base, args.eval_seed_base + args.eval_seeds)
    config_path = write_family(out, family, range(args.train_seeds), args.config)
    print(f"family: {args.train_seeds} training instances, {args.eval_seeds} held-out (seeds {eval_seeds.start}..), "
          f"{args.rounds} rounds each; training YAML {config_path}")

    print("1. room (held-out instances, average JCT in hours):")
    r = room(family, eval_seeds, config_path, args.all_heuristics)
    teacher = r["teacher"]
    print(f"   teacher {TEACHER:32s} {teacher:.3f} h  1.000")
    print(f"   better rule {BETTER:28s} {r['better']:.3f} h  {r['better'] / teacher:.3f}  "
          f"({'>= 15% ahead: the room is there' if r['better'] / teacher <= ROOM_RATIO else 'LESS THAN 15% AHEAD'})")
    print(f"   hand rule in the env's action space      {r['hand_rule_env']:.3f} h  {r['hand_rule_env'] / teacher:.3f}"
          f"  (anchor in the env: {r['anchor_env']:.3f} h, {r['anchor_env'] / teacher:.3f})")
    always = r["always_wait_env"] / teacher
    print(f"   always wait (wait whenever offered)      {r['always_wait_env']:.3f} h  {always:.3f}  "
          f"({'fails the pass mark, as built' if always > PASS_RATIO else 'PASSES THE MARK: the check cannot tell'})")
    if args.all_heuristics:
        for key in ("non_backfill_non_preemptive_best", "best_non_preemptive", "best_preemptive"):
            name, value = r[key]
            print(f"   {key.replace('_', ' ')}: {name} {value:.3f} h  {value / teacher:.3f}")
        print(f"   {len(r['non_preemptive_at_better'])} registered non-preemptive heuristics reach the better rule's "
              f"figure (the teacher is the env's anchor, not the best heuristic)")
    print(f"   ({r['seconds']:.0f} s)")
    result: dict[str, Any] = {"provenance": provenance, "room": r,
                              "args": {k: v if isinstance(v, list) else str(v) for k, v in vars(args).items()}}
    save(out, result)
    if not r["check"]["ok"]:
        for problem in r["check"]["problems"]:
            print(f"   room check: {problem}")
        if args.room_only:
            sys.exit(1)  # a script gating on the room sees it fail
        result["refused"] = "the room check failed: " + "; ".join(r["check"]["problems"])
        save(out, result)
        sys.exit(f"learnability: not training: {result['refused']}")
    if args.room_only:
        return

    runs = args.runs
    best = r.get("best_non_preemptive")
    if "warm" in runs:
        print(f"2a. imitation of the teacher: deepshare imitate {config_path} --out {out / 'imitate'} "
              f"--episodes {args.imitate_episodes} --dagger-rounds 1 --label-smoothing {args.label_smoothing}")
        imitation, seconds = run_imitation(config_path, out / "imitate", args.imitate_episodes, args.label_smoothing)
        score = avg_jct_h(f"{learned_name(config_path)}={imitation}", family, eval_seeds)
        result["imitation"] = {"policy": str(imitation), "avg_jct_h": score, "ratio": score / teacher, "wall_s": seconds}
        print(f"    imitation: held-out {score:.3f} h = {score / teacher:.3f}x teacher ({seconds:.0f} s)")
        save(out, result)
    for name in runs:
        init = Path(result["imitation"]["policy"]) if name == "warm" else None
        print(f"2{'b' if name == 'scratch' else 'c'}. PPO {name}: deepshare train {config_path} --out {out / name} "
              f"--iterations {args.iterations} --seed {args.seed}" + (f" --init-from {init}" if init else ""))
        run = run_ppo(config_path, out / name, family, eval_seeds, teacher,
                      iterations=args.iterations, seed=args.seed, init_from=init)
        if best is not None:
            run["ratio_to_best_non_preemptive"] = run["final_avg_jct_h"] / best[1]
        run["verdict"], run["why"] = verdict(run, r)
        result[name] = run
        result["verdicts"] = {n: result[n]["verdict"] for n in runs if n in result}
        save(out, result)

    print(f"\nresult (held-out average JCT, ratio to the teacher; pass <= {PASS_RATIO}):")
    print(f"  {'policy':40s} {'avg JCT h':>9s} {'ratio':>6s} {'iters':>5s} {'wall s':>7s}")
    print(f"  {'teacher ' + TEACHER:40s} {teacher:9.3f} {1.0:6.3f}")
    print(f"  {'better rule ' + BETTER:40s} {r['better']:9.3f} {r['better'] / teacher:6.3f}")
    print(f"  {'always wait (through the env)':40s} {r['always_wait_env']:9.3f} {always:6.3f}")
    if best is not None:
        print(f"  {'best non-preemptive ' + best[0]:40s} {best[1]:9.3f} {best[1] / teacher:6.3f}")
    if "imitation" in result:
        im = result["imitation"]
        print(f"  {'imitation of the teacher':40s} {im['avg_jct_h']:9.3f} {im['ratio']:6.3f} {'':5s} {im['wall_s']:7.0f}")
    for name in runs:
        run = result[name]
        print(f"  {'PPO ' + name:40s} {run['final_avg_jct_h']:9.3f} {run['final_ratio']:6.3f} {run['iterations']:5d} "
              f"{run['wall_s']:7.0f}  {run['verdict']}")
    for name in runs:
        run = result[name]
        to_best = (f"; {run['ratio_to_best_non_preemptive']:.3f}x the best non-preemptive heuristic"
                   if "ratio_to_best_non_preemptive" in run else "")
        print(f"  PPO {name}: {run['verdict']}: {run['why']}{to_best}")
    for name in runs:
        print(f"  curve, PPO {name} (iteration: return / held-out ratio):")
        print("    " + "  ".join(f"{p['iteration']}: {p['return']:.3f}/{p['ratio']:.3f}" for p in result[name]["curve"]))
    save(out, result)


if __name__ == "__main__":
    main()
