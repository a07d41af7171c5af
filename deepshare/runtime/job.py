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
import ipaddress
import json
import math
import operator
import os
import pickle
import re
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

from deepshare.core.atomic import temp_prefix, write_atomic_with, write_text_atomic
from deepshare.core.bounds import MAX_SAMPLES, MAX_STEP, MAX_THROUGHPUT
from deepshare.core.errors import DeepShareError, first_line, shown

CHECKPOINT_FILE = "checkpoint.pt"
STALE_TEMP_S = 3600.0
"""A save's temporary file older than this is an orphan (its process was killed mid-save: the
scheduler's SIGKILL after the grace lands while jobs checkpoint) and the next save removes it."""


def _int_env(name: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
    """The integer in ``$name`` (``default`` when unset or empty); a ValueError naming the
    variable for anything else: ASCII digits only (``int()`` alone would also take ``" 1_0 "``
    as 10 and Arabic-Indic digits), from ``minimum`` to ``maximum``."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    expected = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    if not re.fullmatch(r"-?[0-9]{1,4000}", value):  # int() refuses more than 4,300 digits anyway
        raise ValueError(f"${name}: expected {expected}, got {value[:40]!r}")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"${name}: expected {expected}, got {number}")
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
    """Address of rank 0's node (for ``torch.distributed`` rendezvous): ``$MASTER_ADDR``, or
    ``127.0.0.1`` when it is unset or empty (as for every other variable here)."""
    return os.environ.get("MASTER_ADDR") or "127.0.0.1"


def master_port() -> int:
    """A free port on rank 0's node picked by the scheduler for this run (1..65535)."""
    return _int_env("MASTER_PORT", 29500, minimum=1, maximum=65535)


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
        backend, init_method=_init_url(), rank=rank(), world_size=world_size(),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return backend


def _init_url() -> str:
    """The rendezvous URL: ``tcp://host:port``, an IPv6 address in brackets (``tcp://[::1]:29500``;
    unbracketed, its colons would be read as the port's). A ``$MASTER_ADDR`` that is neither a
    host name, an IPv4 address nor an IPv6 address (bracketed or not) is a ValueError naming it:
    ``host:port`` (the port is ``$MASTER_PORT``'s), a URL or a name with spaces would otherwise
    become a URL that the rendezvous misreads or waits on until its timeout."""
    host = master_addr()
    bracketed = host.startswith("[") and host.endswith("]")
    inner = host[1:-1] if bracketed else host
    if ":" in inner and _is_ipv6(inner):
        return f"tcp://[{inner}]:{master_port()}"
    if bracketed or not _HOST_NAME.fullmatch(host):
        raise ValueError(f"$MASTER_ADDR: expected a host name or an IP address (the port is $MASTER_PORT's), "
                         f"got {shown(host)}")
    return f"tcp://{host}:{master_port()}"


def _is_ipv6(text: str) -> bool:
    """Whether ``text`` is an IPv6 address, with at most a zone id of letters, digits, ``.``,
    ``-`` and ``_`` (``fe80::1%eth0``; ``ipaddress`` takes any text after the ``%``, a space or
    a ``]`` too, which the URL would not keep)."""
    _, percent, zone = text.partition("%")
    if percent and not _ZONE_ID.fullmatch(zone):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


_ZONE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_.])?")
"""A host name or an IPv4 address: ASCII letters, digits, ``.``, ``-`` and ``_`` (names that real
clusters use), at most 254 characters, not starting or ending with ``-``."""


def report(samples: float | None = None, throughput: float | None = None, step: int | None = None) -> None:
    """Tell the scheduler the job's progress: cumulative ``samples``, ``throughput`` in samples/s
    (whole job), ``step``. Only rank 0's reports are recorded; other ranks' calls are cheap no-ops."""
    control = _control_dir()
    if control is None or rank() != 0:
        return
    doc = {"samples": _reported("samples", samples, float, MAX_SAMPLES),
           "throughput": _reported("throughput", throughput, float, MAX_THROUGHPUT),
           "step": _reported("step", step, int, MAX_STEP), "time": time.time()}
    # No fsync (it took ~8 ms a call): a report lost in a crash is harmless, the next one replaces
    # it; the rename still keeps the scheduler from reading half a file.
    try:
        write_text_atomic(control / "report.json", json.dumps(doc, allow_nan=False), "progress report", sync=False)
    except (OSError, DeepShareError) as exc:  # a missing control folder, a full disk
        _warn_once("report.json", "write", f"deepshare.job.report: progress report not written ({exc}); the job "
                   "goes on, and later reports that cannot be written are left out without a warning", stacklevel=2)


_warned: set[tuple[str, str]] = set()
"""The (field, problem) pairs :func:`report` has warned about: each is warned about once per
process, since a job reports every step and the same mistake would otherwise print (and, its
value changing, fill the caller's ``__warningregistry__``) once per step."""


def _warn_once(field: str, problem: str, message: str, stacklevel: int) -> None:
    """``message`` as a RuntimeWarning unless ``(field, problem)`` was warned about already."""
    if (field, problem) not in _warned:
        _warned.add((field, problem))
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def _reported(name: str, value: Any, kind: type, most: float) -> float | int | None:
    """``value`` as the plain number a report holds (a numpy or 0-d torch number too); None, with
    a warning the first time for each field and problem, for what the scheduler would refuse
    (:func:`~deepshare.runtime.reports.check_report`: not a number, a bool, NaN, infinity, a
    number outside 0..``most`` or, for ``step``, a fraction): a progress report must never end the
    training step that sends it."""
    if value is None:
        return None
    try:
        number = math.nan if _not_a_number(value) else float(value)
    except Exception:  # noqa: BLE001 - TypeError, ValueError, OverflowError (10**400), a tensor's RuntimeError...
        number = math.nan
    whole = _whole(value) if kind is int else None  # exact: float() rounds 2**53 + 1 to 2**53
    if not 0 <= number <= most or (whole is not None and not 0 <= whole <= most):  # NaN fails the range too
        problem = "not a number from 0 to the bound"
    elif kind is int and not number.is_integer():
        problem = "a fraction"
    else:
        return (whole if whole is not None else int(number)) if kind is int else number
    _warn_once(name, problem, f"deepshare.job.report: {name}={shown(value)} left out: expected a number from 0 to "
               f"{most:g}{' (a whole step)' if kind is int else ''}; later such values of {name} are left out "
               "without a warning", stacklevel=3)
    return None


def _not_a_number(value: Any) -> bool:
    """Whether ``value`` is no number although ``float()`` takes it: a text (``"5"``), or a bool
    of Python, numpy (``np.True_``) or torch (a bool tensor), which would be recorded as 0 or 1."""
    if isinstance(value, (bool, str, bytes, bytearray)):
        return True
    try:
        return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")
    except Exception:  # noqa: BLE001 - a hostile dtype's __str__
        return True


def _whole(value: Any) -> int | None:
    """``value`` as an exact int when it is an integer type (a Python, numpy or 0-d integer torch
    number: ``operator.index`` takes them), else None (a float, a string...)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except Exception:  # noqa: BLE001 - TypeError for non-integers, a tensor's own errors
        return None


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


def save_checkpoint(state: Any, *, weights_only: bool = True) -> Path | None:
    """Save ``state`` atomically (rank 0 only; returns the path there, ``None`` elsewhere).

    Uses ``torch.save`` when torch is importable, else pickle; a reader never sees half a file.
    With ``weights_only`` (the default, as :func:`load_checkpoint`'s), a state that
    ``load_checkpoint()`` would refuse as not plain data (a numpy number or array, a
    ``pathlib.Path``, a custom class) is refused now with a TypeError naming its types, and the
    previous checkpoint is kept: otherwise the job would checkpoint fine and fail only when
    relaunched after a preemption. Pass ``weights_only=False`` for a state you load with
    ``load_checkpoint(weights_only=False)``.
    """
    if rank() != 0:
        return None
    folder = checkpoint_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DeepShareError(f"{folder}: cannot hold checkpoints: {exc.strerror or exc}") from None
    path = folder / CHECKPOINT_FILE
    try:
        import torch
    except ImportError:  # pragma: no cover - torch-free jobs
        torch = None

    def write(fh: Any) -> None:
        if torch is None:  # pragma: no cover
            pickle.dump(state, fh)
            return
        torch.save(state, fh)  # straight into the file: no second copy of the state in memory
        if weights_only:
            fh.flush()
            fh.seek(0)
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(fh)  # reads data.pkl only
            if unsafe:
                raise TypeError(
                    f"{path}: not saved, the state holds {', '.join(sorted(unsafe))}, which load_checkpoint() would "
                    "refuse as not plain data: convert them (numpy values with .tolist() or torch.from_numpy, paths "
                    "with str), or save and load with weights_only=False if nobody else can write the folder")

    _remove_orphans(folder)
    # A fresh temporary file of a random name, never a symlink someone planted, removed if the
    # write or the check fails; two saves at once each rename a whole file of their own.
    return write_atomic_with(path, write, "checkpoint")


def _remove_orphans(folder: Path) -> None:
    """Delete temporary files of saves killed midway (older than :data:`STALE_TEMP_S`)."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in folder.glob(f"{temp_prefix(folder / CHECKPOINT_FILE)}*.tmp"):  # the atomic write's own names
        try:
            if tmp.lstat().st_mtime < cutoff:
                tmp.unlink()
        except OSError:
            pass


def load_checkpoint(*, weights_only: bool = True, map_location: Any = None) -> Any | None:
    """The state last saved by :func:`save_checkpoint` for this job, or ``None`` if none.

    The checkpoint folder is often shared storage that others can write, so by default the file is
    read as data only (``torch.load(weights_only=True)``: tensors, numbers, strings and containers;
    without torch, a pickle holding no Python objects beyond those): a planted file that names
    code raises :class:`UnsafeCheckpoint` instead of running it. Pass ``weights_only=False`` only
    for a state with custom classes in a folder nobody else can write.

    ``map_location`` is ``torch.load``'s: ``"cpu"`` loads a checkpoint saved from GPU tensors on a
    node without CUDA (after a migration), which otherwise raises a RuntimeError saying so. The
    file is read from disk as torch needs it, never copied whole into memory first, and a zip
    checkpoint's CRCs are checked first: torch does not, and a flipped bit would load as a wrong
    weight (:class:`CorruptCheckpoint` naming the record).
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
        try:
            import torch
        except ImportError:  # pragma: no cover - torch-free jobs
            return _unpickle(fh.read(), weights_only, path)
        _check_crcs(fh, path)
        fh.seek(0)
        try:
            return torch.load(fh, map_location=map_location, weights_only=weights_only)
        except pickle.UnpicklingError as exc:
            if weights_only and _well_formed_pickle(fh):  # a whole pickle the data-only loader refused
                raise UnsafeCheckpoint(f"{path}: refused, the checkpoint names Python objects beyond plain data "
                                       "(load_checkpoint(weights_only=False) trusts it): "
                                       f"{str(exc).splitlines()[0]}") from None
            raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None
        except MemoryError:  # not damage: a job that started afresh on it would overwrite a good checkpoint
            raise MemoryError(f"{path}: not enough memory to load the checkpoint "
                              f"({os.fstat(fh.fileno()).st_size:,} bytes)") from None
        except Exception as exc:  # noqa: BLE001 - torch and pickle raise many kinds for a damaged file
            reason = str(exc).strip().split(". ")[0]
            if reason.startswith("Attempting to deserialize object on"):  # a device this node lacks: not damage
                raise RuntimeError(f"{path}: the checkpoint holds tensors on a device this node does not have "
                                   f"({reason[:200]}); load_checkpoint(map_location='cpu') loads them "
                                   "on the CPU") from None
            raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None


def _check_crcs(fh: Any, path: Path) -> None:
    """Refuse a zip checkpoint (``torch.save``'s format) whose records fail their CRC-32 check:
    ``torch.load`` does not check them, so a flipped bit in a tensor's bytes would load silently
    as a wrong value. Reads the file through once, in chunks; other files are left to torch."""
    try:
        if not zipfile.is_zipfile(fh):
            return
        with zipfile.ZipFile(fh) as archive:
            _stored_once(archive.infolist(), os.fstat(fh.fileno()).st_size, path)
            bad = archive.testzip()
    except CorruptCheckpoint:
        raise
    except Exception as exc:  # noqa: BLE001 - zipfile raises several kinds for a damaged archive
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint ({first_line(exc, 200)})") from None
    if bad is not None:
        raise CorruptCheckpoint(f"{path}: damaged or not a checkpoint (record {bad} fails its CRC check)")


def _stored_once(records: list[Any], size: int, path: Path) -> None:
    """Refuse a zip that is no ``torch.save`` archive before its CRCs are read: torch stores its
    records uncompressed, each once, so a compressed record, two entries sharing one record's bytes
    or records larger together than the file are planted (a few KB of bzip2 listed many times
    unpacked to gigabytes, minutes of CPU, before torch would have refused it in milliseconds)."""
    offsets: set[int] = set()
    total = 0
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED or record.file_size != record.compress_size:
            raise CorruptCheckpoint(f"{path}: not a checkpoint (record {record.filename[:80]!r} is compressed; "
                                    "torch.save stores its records as they are)")
        if record.header_offset in offsets:
            raise CorruptCheckpoint(f"{path}: not a checkpoint (two entries share the bytes of record "
                                    f"{record.filename[:80]!r})")
        offsets.add(record.header_offset)
        total += record.file_size
    if total > size:
        raise CorruptCheckpoint(f"{path}: not a checkpoint (its records claim {total:,} bytes, the file holds {size:,})")


def _well_formed_pickle(fh: Any) -> bool:
    """Whether the open file ``fh`` (a torch archive whose ``data.pkl`` is read, or a plain
    pickle) holds a complete pickle stream, read opcode by opcode without running any: what tells
    a checkpoint refused for naming code from a damaged one (torch's message says neither
    reliably)."""
    import pickletools

    try:
        stream = fh
        if zipfile.is_zipfile(fh):
            archive = zipfile.ZipFile(fh)
            stream = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        else:
            fh.seek(0)
        for _ in pickletools.genops(stream):
            pass
    except Exception:  # noqa: BLE001 - any failure to read it through (MemoryError too) is damage
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
