"""A torch-free job for the live-scheduler tests whose subject is the scheduler, not DDP.

It speaks the job API exactly as the example DDP job does (``deepshare/data/jobs/ddp_mlp.py``):
it resumes its step from ``job.load_checkpoint()``, reports samples, throughput and step,
checkpoints every ``--checkpoint-every`` steps and when ``job.should_stop()`` turns True, and
rank 0 writes ``result.json`` with the final step and ``runs`` (the step each launch started
from, and its world size). Its ranks do not talk to each other.

It hides torch from itself, so ``deepshare.job`` takes its torch-free paths (pickled checkpoints,
a per-rank stop flag), as a job without torch would. A rank costs about 0.1 CPU-second where a
DDP rank, which imports torch and joins a gloo group, costs about 5.

Run: ``python tests/runtime/step_job.py --steps 20 [--step-sleep S] [--checkpoint-every N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError

from deepshare import job  # noqa: E402
from deepshare.core.atomic import write_text_atomic  # noqa: E402


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="step_job")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step (what it reports)")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--checkpoint-every", type=int, default=25)
    p.add_argument("--report-every", type=int, default=5)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    world = job.world_size()
    state = job.load_checkpoint()
    step, runs = (state["step"], state["runs"]) if state is not None else (0, [])
    runs = [*runs, {"attempt": job.attempt(), "start_step": step, "world_size": world}]

    def save() -> None:
        job.save_checkpoint({"step": step, "runs": runs})

    job.report(samples=step * args.batch * world, step=step)
    window_t, window_step = time.perf_counter(), step
    while step < args.steps:
        if job.should_stop():
            save()
            return 0
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step % args.checkpoint_every == 0:
            save()
        if step % args.report_every == 0 or step == args.steps:
            now = time.perf_counter()
            thp = (step - window_step) * args.batch * world / max(now - window_t, 1e-9)
            job.report(samples=step * args.batch * world, throughput=thp, step=step)
            window_t, window_step = now, step
    save()
    if job.rank() == 0:
        write_text_atomic(job.checkpoint_dir() / "result.json", json.dumps({"step": step, "runs": runs}) + "\n",
                          "job result")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
