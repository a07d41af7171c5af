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
import math
import os
import pickle
import time
import warnings
from pathlib import Path
from typing import Any

from deepshare.core.atomic import temp_prefix, write_bytes_atomic, write_text_atomic
from deepshare.core.bounds import MAX_SAMPLES, MAX_STEP, MAX_THROUGHPUT
from deepshare.core.errors import DeepShareError, first_line

CHECKPOINT_FILE = "checkpoint.pt"
STALE_TEMP_S = 3600.0
"""A save's temporary file older than this is an orphan (its process was killed mid-save: the
scheduler's SIGKILL after the grace lands while jobs checkpoint) and the next save removes it."""


def _int_env(name: str, default: int, minimum: int = 0) -> int:
    """The integer in ``$name`` (``default`` when unset or empty); a ValueError naming the
    variable for anything else."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"${name}: expected an integer >= {minimum}, got {value[:40]!r}") from None
    if number < minimum:
        raise ValueError(f"${name}: expected an integer >= {minimum}, got {number}")
    return number


def rank() -> int:
    """This process's rank in the job, 0..world_size()-1 (a ValueError otherwise: with no rank 0,
    nothing would ever save or report)."""
    value = _int_env("RANK", 0)
    size = world_size()
    if value >= size:
        raise ValueError(f"$RANK: expected 0..{size - 1} ($WORLD_SIZE is {size}), got {value}")
    return value


def world_size() -> int:
    """Processes in the job (one per GPU)."""
    return _int_env("WORLD_SIZE", 1, minimum=1)


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
    """``$DEEPSHARE_CHECKPOINT_DIR``, or ``./checkpoints`` when it is unset or empty."""
    return Path(os.environ.get("DEEPSHARE_CHECKPOINT_DIR") or "checkpoints")


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
    doc = {"samples": _reported("samples", samples, float, MAX_SAMPLES),
           "throughput": _reported("throughput", throughput, float, MAX_THROUGHPUT),
           "step": _reported("step", step, int, MAX_STEP), "time": time.time()}
    write_text_atomic(control / "report.json", json.dumps(doc, allow_nan=False), "progress report")


def _reported(name: str, value: Any, kind: type, most: float) -> float | int | None:
    """``value`` as the plain number a report holds (a numpy or 0-d torch number too); None, with
    a warning, for what the scheduler would refuse (:func:`~deepshare.runtime.reports.check_report`:
    a bool, NaN, infinity, a number outside 0..``most`` or, for ``step``, a fraction): a progress
    report must never end the training step that sends it."""
    if value is None:
        return None
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several values
        number = math.nan
    if not 0 <= number <= most or (kind is int and not number.is_integer()):  # NaN fails the range too
        warnings.warn(f"deepshare.job.report: {name}={str(value)[:40]} left out: expected a number from 0 to {most:g}"
                      f"{' (a whole step)' if kind is int else ''}", RuntimeWarning, stacklevel=3)
        return None
    return int(number) if kind is int else number


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
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DeepShareError(f"{folder}: cannot hold checkpoints: {exc.strerror or exc}") from None
    buf = io.BytesIO()
    try:
        import torch

        torch.save(state, buf)
    except ImportError:  # pragma: no cover
        pickle.dump(state, buf)
    _remove_orphans(folder)
    # A fresh temporary file of a random name, never a symlink someone planted, removed if the
    # write fails; two saves at once each rename a whole file of their own.
    return write_bytes_atomic(folder / CHECKPOINT_FILE, buf.getvalue(), "checkpoint")


def _remove_orphans(folder: Path) -> None:
    """Delete temporary files of saves killed midway (older than :data:`STALE_TEMP_S`)."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in folder.glob(f"{temp_prefix(folder / CHECKPOINT_FILE)}*.tmp"):  # the atomic write's own names
        try:
            if tmp.lstat().st_mtime < cutoff:
                tmp.unlink()
        except OSError:
            pass


def load_checkpoint(*, weights_only: bool = True) -> Any | None:
    """The state last saved by :func:`save_checkpoint` for this job, or ``None`` if none.

    The checkpoint folder is often shared storage that others can write, so by default the file is
    read as data only (``torch.load(weights_only=True)``: tensors, numbers, strings and containers;
    without torch, a pickle holding no Python objects beyond those): a planted file that names
    code raises :class:`UnsafeCheckpoint` instead of running it. Pass ``weights_only=False`` only
    for a state with custom classes in a folder nobody else can write.
    """
    from deepshare.runtime.private import open_regular

    path = checkpoint_dir() / CHECKPOINT_FILE
    try:
        fh = os.fdopen(open_regular(path, os.O_RDONLY), "rb")  # a FIFO planted there must not hang the start
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptCheckpoint(f"{path}: cannot read the checkpoint: {exc.strerror or exc}") from None
    with fh:
        data = fh.read()
    try:
        import torch
    except ImportError:  # pragma: no cover - torch-free jobs
        return _unpickle(data, weights_only, path)
    try:
        return torch.load(io.BytesIO(data), weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        if weights_only and _well_formed_pickle(data):  # a whole pickle the data-only loader refused
            raise UnsafeCheckpoint(f"{path}: refused, the checkpoint names Python objects beyond plain data "
                                   f"(load_checkpoint(weights_only=False) trusts it): {str(exc).splitlines()[0]}") from None
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None
    except Exception as exc:  # noqa: BLE001 - torch and pickle raise many kinds for a damaged file
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None


def _well_formed_pickle(data: bytes) -> bool:
    """Whether ``data`` (a torch archive's ``data.pkl``, or a plain pickle) is a complete pickle
    stream, read opcode by opcode without running any: what tells a checkpoint refused for
    naming code from a damaged one (torch's message says neither reliably)."""
    import pickletools
    import zipfile

    stream = data
    try:
        if zipfile.is_zipfile(io.BytesIO(data)):
            archive = zipfile.ZipFile(io.BytesIO(data))
            stream = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        for _ in pickletools.genops(stream):
            pass
    except Exception:  # noqa: BLE001 - any failure to read it through is damage
        return False
    return True


class UnsafeCheckpoint(Exception):
    """A checkpoint that would run code when loaded as data only."""


class CorruptCheckpoint(Exception):
    """A checkpoint that cannot be read: damaged (a truncated or zeroed file), not a checkpoint at
    all, or not a regular file. Loading it without ``weights_only`` would not help."""


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _unpickle(data: bytes, weights_only: bool, path: Path) -> Any:  # pragma: no cover - torch-free jobs
    try:
        return _DataOnlyUnpickler(io.BytesIO(data)).load() if weights_only else pickle.loads(data)
    except pickle.UnpicklingError as exc:
        if weights_only and "is not plain data" in str(exc):
            raise UnsafeCheckpoint(f"{path}: refused, {exc} (load_checkpoint(weights_only=False) trusts it)") from None
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None
    except Exception as exc:  # noqa: BLE001 - pickle raises many kinds for a damaged file
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None
