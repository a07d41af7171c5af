"""Example job: a small MLP trained with PyTorch DDP (gloo on CPU, NCCL on GPU) under DeepShare.

It shows the whole job API: it resumes from ``deepshare.job.load_checkpoint()``, reports its
cumulative samples and throughput, checkpoints every ``--checkpoint-every`` steps, and when
``deepshare.job.should_stop()`` turns True (preemption or migration) it checkpoints and returns.

Resumption is exact: the batch of step ``s`` on rank ``r`` is drawn from a generator seeded with
``(seed, s, r)``, and the model, optimizer and step are all in the checkpoint, so an interrupted
and resumed run ends with the same parameters as an uninterrupted one (same world size). At the
end rank 0 writes ``result.json`` beside the checkpoint: the final step, a parameter checksum and
``runs`` (the step each launch started from), which the tests read.

Run it alone: ``python -m examples.jobs.ddp_mlp --steps 50`` (one process, no scheduler). It ships
as package data so that an installed deepshare has it (``deepshare.experiments.autoscale_live``
copies it next to its jobs); ``examples/jobs/ddp_mlp.py`` is the same job for the example specs.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch import nn

from deepshare import job
from deepshare.core.atomic import write_text_atomic


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ddp_mlp")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--width", type=int, default=64, help="hidden width")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step (stretch a tiny job)")
    p.add_argument("--checkpoint-every", type=int, default=25, help="checkpoint period in steps")
    p.add_argument("--report-every", type=int, default=10, help="report period in steps")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_model(width: int) -> nn.Module:
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def batch(seed: int, step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(size, 16, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True).sin()
    return x, y


def _cpu(tree):
    """A copy of a state dict with every tensor on the CPU (checkpoints must not name a GPU)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cpu(v) for v in tree)
    return tree


def checksum(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main(argv: list[str]) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    world, rank = job.world_size(), job.rank()
    backend = job.init_process_group() if world > 1 else None
    cuda = torch.cuda.is_available() and backend in (None, "nccl")
    device = torch.device("cuda", job.local_rank() % torch.cuda.device_count()) if cuda else torch.device("cpu")
    model = make_model(args.width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = job.load_checkpoint()  # saved from CPU copies: loads on any node, with or without a GPU
    step, runs = 0, []
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, runs = state["step"], state["runs"]
    runs = [*runs, {"attempt": job.attempt(), "start_step": step, "world_size": world}]
    if world == 1:
        ddp = model
    elif device.type == "cuda":
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    else:
        ddp = nn.parallel.DistributedDataParallel(model)

    def save() -> None:
        job.save_checkpoint({"model": _cpu(model.state_dict()), "optimizer": _cpu(opt.state_dict()), "step": step,
                             "runs": runs})

    job.report(samples=step * args.batch * world, step=step)  # where this run starts
    window_t, window_step = time.perf_counter(), step
    last_loss: float | None = None
    while step < args.steps:
        if job.should_stop():
            save()
            return 0
        x, y = (t.to(device) for t in batch(args.seed, step, rank, args.batch))
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        last_loss = float(loss.detach())
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
    if rank == 0:
        result = {"step": step, "checksum": checksum(model), "loss": last_loss, "runs": runs}
        write_text_atomic(job.checkpoint_dir() / "result.json", json.dumps(result, indent=2) + "\n", "job result")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
