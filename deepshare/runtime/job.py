"""The API a training job uses under the DeepShare live scheduler.

Every worker process of a job gets its place in the job from environment variables set by the
scheduler's worker actor (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT`` as ``torch.distributed`` expects, plus ``DEEPSHARE_*``); reading them is this
module's job. Outside the scheduler (a plain ``python train.py``) it behaves as a single-process
job: rank 0 of 1, no preemption, checkpoints in ``DEEPSHARE_CHECKPOINT_DIR`` or ``./checkpoints``.

A job:

* calls :func:`load_checkpoint` at start and resumes from what it returns (``None``: fresh);
* calls :func:`report` now and then with its cumulative ``samples`` and its ``throughput``
  (samples/s over all ranks), which the scheduler records beside the simulator's prediction;
* polls :func:`should_stop` every step; when it returns True the job saves a checkpoint with
  :func:`save_checkpoint` and returns (exit status 0). The scheduler then relaunches it later,
  maybe elsewhere (migration), and :func:`load_checkpoint` gives the state back.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

from deepshare.core.atomic import write_text_atomic

CHECKPOINT_FILE = "checkpoint.pt"


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None or value == "" else int(value)


def rank() -> int:
    """This process's rank in the job, 0..world_size()-1."""
    return _int_env("RANK", 0)


def world_size() -> int:
    """Processes in the job (one per GPU)."""
    return _int_env("WORLD_SIZE", 1)


def local_rank() -> int:
    """Rank among this job's processes on this node."""
    return _int_env("LOCAL_RANK", 0)


def master_addr() -> str:
    """Address of rank 0's node (for ``torch.distributed`` rendezvous)."""
    return os.environ.get("MASTER_ADDR", "127.0.0.1")


def master_port() -> int:
    """A free port on rank 0's node picked by the scheduler for this run."""
    return _int_env("MASTER_PORT", 29500)


def job_id() -> str:
    return os.environ.get("DEEPSHARE_JOB_ID", "local")


def attempt() -> int:
    """How many times this job has been launched before this run (0 on the first)."""
    return _int_env("DEEPSHARE_ATTEMPT", 0)


def checkpoint_dir() -> Path:
    return Path(os.environ.get("DEEPSHARE_CHECKPOINT_DIR", "checkpoints"))


def _control_dir() -> Path | None:
    value = os.environ.get("DEEPSHARE_CONTROL_DIR")
    return Path(value) if value else None


def init_process_group(timeout_s: float = 120.0) -> str:
    """``torch.distributed.init_process_group`` with NCCL when CUDA is usable, else gloo.

    Returns the backend. With fake GPUs (a test cluster) CUDA is unavailable, so gloo on CPU.
    """
    import datetime

    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank() % torch.cuda.device_count())
    dist.init_process_group(
        backend, init_method=f"tcp://{master_addr()}:{master_port()}", rank=rank(), world_size=world_size(),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return backend


def report(samples: float | None = None, throughput: float | None = None, step: int | None = None) -> None:
    """Tell the scheduler the job's progress: cumulative ``samples``, ``throughput`` in samples/s
    (whole job), ``step``. Only rank 0's reports are recorded; other ranks' calls are cheap no-ops."""
    control = _control_dir()
    if control is None or rank() != 0:
        return
    doc = {"samples": samples, "throughput": throughput, "step": step, "time": time.time()}
    write_text_atomic(control / "report.json", json.dumps(doc), "progress report")


def should_stop(sync: bool = True) -> bool:
    """Whether the scheduler asked this job to checkpoint and exit (preemption or migration).

    With ``sync`` and an initialised ``torch.distributed`` group, all ranks agree (an all-reduce
    of the flag), so every rank stops after the same step; call it on every rank every step.
    """
    control = _control_dir()
    flag = bool(control is not None and (control / "stop").exists())
    if sync and world_size() > 1:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch-free jobs decide per rank
            return flag
        if dist.is_available() and dist.is_initialized():
            t = torch.tensor([1 if flag else 0], dtype=torch.int32)
            if dist.get_backend() == "nccl":  # NCCL reduces only CUDA tensors
                t = t.cuda()
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = bool(t.item())
    return flag


def save_checkpoint(state: Any) -> Path | None:
    """Save ``state`` atomically (rank 0 only; returns the path there, ``None`` elsewhere).

    Uses ``torch.save`` when torch is importable, else pickle; a reader never sees half a file.
    """
    if rank() != 0:
        return None
    folder = checkpoint_dir()
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        import torch

        torch.save(state, buf)
    except ImportError:  # pragma: no cover
        pickle.dump(state, buf)
    target = folder / CHECKPOINT_FILE
    tmp = folder / f".{CHECKPOINT_FILE}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(buf.getvalue())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    return target


def load_checkpoint(*, weights_only: bool = True) -> Any | None:
    """The state last saved by :func:`save_checkpoint` for this job, or ``None`` if none.

    The checkpoint folder is often shared storage that others can write, so by default the file is
    read as data only (``torch.load(weights_only=True)``: tensors, numbers, strings and containers;
    without torch, a pickle holding no Python objects beyond those): a planted file that names
    code raises :class:`UnsafeCheckpoint` instead of running it. Pass ``weights_only=False`` only
    for a state with custom classes in a folder nobody else can write.
    """
    path = checkpoint_dir() / CHECKPOINT_FILE
    if not path.exists():
        return None
    data = path.read_bytes()
    try:
        import torch
    except ImportError:  # pragma: no cover - torch-free jobs
        return _unpickle(data, weights_only, path)
    try:
        return torch.load(io.BytesIO(data), weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(f"{path}: refused, the checkpoint names Python objects beyond plain data "
                               f"(load_checkpoint(weights_only=False) trusts it): {str(exc).splitlines()[0]}") from None


class UnsafeCheckpoint(Exception):
    """A checkpoint that would run code when loaded as data only."""


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _unpickle(data: bytes, weights_only: bool, path: Path) -> Any:  # pragma: no cover - torch-free jobs
    if not weights_only:
        return pickle.loads(data)
    try:
        return _DataOnlyUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(f"{path}: refused, {exc} (load_checkpoint(weights_only=False) trusts it)") from None
