"""The per-GPU worker: a Ray actor that runs one rank of a job as a child process.

The actor holds one GPU of the job's placement-group bundle (Ray sets ``CUDA_VISIBLE_DEVICES``)
and starts the rank with the distributed environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and ``DEEPSHARE_*`` variables that
:mod:`deepshare.job` reads. Preemption is a file: :meth:`JobWorker.request_stop` creates
``$DEEPSHARE_CONTROL_DIR/stop``, which ``deepshare.job.should_stop()`` polls; progress comes back
the other way in ``report.json``. The child gets ``PR_SET_PDEATHSIG`` so it dies with the actor
(removing the placement group kills the actor, and so the rank).

The rank's output goes to ``log_path`` (under the scheduler's state folder, see
:mod:`deepshare.runtime.logs`), one header line per attempt. A rank that cannot be started (no
such program, a missing ``working_dir``, an unwritable checkpoint folder) is reported by
:meth:`JobWorker.start` with the OS's message, and written to the log too.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from deepshare.runtime.logs import LOG_FOLDERS
from deepshare.runtime.private import make_private_dirs, open_regular
from deepshare.runtime.reports import FIELDS as REPORT_FIELDS, MAX_REPORT_BYTES


SECRET_ENV = frozenset({"DEEPSHARE_SCHEDULER_TOKEN", "DEEPSHARE_SERVE_TOKEN"})
"""Variables of the worker's own environment that are not passed on to ranks (a job's ``env`` may
still set them)."""
DEVICE_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                        "HIP_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES", "TPU_VISIBLE_CHIPS",
                        "ONEAPI_DEVICE_SELECTOR", "HABANA_VISIBLE_MODULES"})
"""The accelerators a rank may use, as Ray set them for the worker's bundle: a job's ``env`` cannot
set them (a spec copied from a workstation's shell would otherwise widen every rank onto GPUs
the scheduler gave other jobs); the rank sees the worker's own values."""


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    """Everything one rank needs to start."""

    job_id: str
    attempt: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    argv: tuple[str, ...]
    """The program: ``python -m deepshare.runtime.entry MOD:FN ARGS`` or the spec's command + args."""
    checkpoint_dir: str
    working_dir: str | None
    env: tuple[tuple[str, str], ...] = ()
    log_path: str | None = None
    """Where the rank's output goes (appended); None: ``rank.log`` in the worker's control folder."""


@dataclass(frozen=True, slots=True)
class StartOutcome:
    """What :meth:`JobWorker.start` did: the rank's pid, or why it could not start."""

    pid: int | None
    error: str | None = None
    log_tail: str = ""


@dataclass(frozen=True, slots=True)
class Report:
    """Rank 0's latest ``report.json`` as the job wrote it: values unchecked (the scheduler checks
    them, :mod:`deepshare.runtime.reports`), or ``problem`` when the file itself is unusable."""

    samples: Any
    throughput: Any
    step: Any
    time: Any
    problem: str | None = None
    """Why the file could not be read as a report (not a regular file, too large, not a JSON
    object, an unknown field); the fields are then None."""

    def document(self) -> dict[str, Any]:
        """The report's fields as the job wrote them (what :func:`~deepshare.runtime.reports.check_report` reads)."""
        return {"samples": self.samples, "throughput": self.throughput, "step": self.step, "time": self.time}


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    rank: int
    started: bool
    running: bool
    exit_code: int | None
    stop_requested: bool
    report: Report | None
    log_tail: str


def _bad_report(problem: str) -> Report:
    return Report(None, None, None, None, problem)


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


def python_argv(entrypoint: str, args: tuple[str, ...]) -> tuple[str, ...]:
    return (sys.executable, "-m", "deepshare.runtime.entry", entrypoint, *args)


class JobWorker:
    """One rank's host (wrapped with ``ray.remote`` by the launcher)."""

    def __init__(self, job_id: str, attempt: int, rank: int) -> None:
        self.control = Path(tempfile.mkdtemp(prefix=f"ds-{job_id}-a{attempt}-r{rank}-"))
        self.rank = rank
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.control / "rank.log"
        self.stop_asked = False
        """Whether :meth:`request_stop` was called: what :meth:`poll` reports as ``stop_requested``.
        Not the ``stop`` file: the rank can write its control folder, and a rank that created the
        file itself and crashed was read as stopped on request, requeued as preempted without
        counting as a failed attempt, every time it crashed."""
        self.log_start = 0
        """Where this attempt's output starts in the log (earlier attempts' output precedes it)."""
        self.log_folders = 0
        """Folders above the log opened without following a symlink (:data:`~deepshare.runtime.logs.LOG_FOLDERS`
        for a log under the state folder, whose job folder the job's process can replace)."""

    def address(self) -> tuple[str, int]:
        """This node's IP and a free port on it (rank 0's answer is the rendezvous address)."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            port = s.getsockname()[1]
        return ip, port

    def start(self, launch: WorkerLaunch) -> StartOutcome:
        """Start the rank; idempotent (a second call returns the running child's pid). Never raises for
        a rank that cannot start: the outcome says why (the OS's message) and the log says it too."""
        if self.proc is not None:
            return StartOutcome(self.proc.pid)
        if launch.log_path:
            self.log_path, self.log_folders = Path(launch.log_path), LOG_FOLDERS
        try:
            make_private_dirs(self.log_path.parent)
            fd = open_regular(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, parents=self.log_folders)
        except OSError as exc:
            return StartOutcome(None, f"cannot open the rank's log {self.log_path}: {exc.strerror or exc}")
        with os.fdopen(fd, "ab") as log:
            self.log_start = log.seek(0, os.SEEK_END)
            header = (f"--- deepshare: job {launch.job_id} attempt {launch.attempt} rank {launch.rank}/"
                      f"{launch.world_size} on {socket.gethostname()} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ---\n")
            log.write(header.encode())
            ignored = sorted(DEVICE_ENV.intersection(dict(launch.env)))
            if ignored:
                log.write(f"deepshare: env {', '.join(ignored)} ignored: the scheduler assigns the rank's devices\n".encode())
            log.flush()
            error = self._spawn(launch, log)
            if error is not None:
                log.write(f"deepshare: cannot start rank {launch.rank}: {error}\n".encode())
        if error is not None:
            return StartOutcome(None, error, self._tail())
        assert self.proc is not None
        return StartOutcome(self.proc.pid)

    def _spawn(self, launch: WorkerLaunch, log: IO[bytes]) -> str | None:
        """Start the child writing to ``log``; the reason it could not start, or None."""
        if launch.working_dir and not os.path.isdir(launch.working_dir):
            return f"working_dir {launch.working_dir}: no such directory on {socket.gethostname()}"
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}  # jobs never see the services' tokens
        env.update((k, v) for k, v in launch.env if k not in DEVICE_ENV)  # Ray's device assignment stands
        env.update({
            "RANK": str(launch.rank), "WORLD_SIZE": str(launch.world_size), "LOCAL_RANK": str(launch.local_rank),
            "LOCAL_WORLD_SIZE": str(launch.local_world_size), "MASTER_ADDR": launch.master_addr,
            "MASTER_PORT": str(launch.master_port), "DEEPSHARE_JOB_ID": launch.job_id,
            "DEEPSHARE_ATTEMPT": str(launch.attempt - 1), "DEEPSHARE_CHECKPOINT_DIR": launch.checkpoint_dir,
            "DEEPSHARE_CONTROL_DIR": str(self.control), "PYTHONUNBUFFERED": "1",
        })
        if launch.working_dir:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (launch.working_dir, env.get("PYTHONPATH", "")) if p)
        try:
            Path(launch.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"checkpoint_dir {launch.checkpoint_dir}: {exc.strerror or exc}"
        try:
            self.proc = subprocess.Popen(
                list(launch.argv), cwd=launch.working_dir or None, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_pdeathsig,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            strerror = getattr(exc, "strerror", None)
            name = getattr(exc, "filename", None) or launch.argv[0]
            return f"{name}: {strerror}" if strerror else f"{type(exc).__name__}: {exc}"
        return None

    def request_stop(self) -> None:
        """Ask the rank to checkpoint and exit (``deepshare.job.should_stop()`` turns True)."""
        self.stop_asked = True
        (self.control / "stop").touch()

    def _report(self) -> Report | None:
        """The job's latest report, None before its first. The job's process owns the control
        folder, so the file is opened as untrusted (:func:`~deepshare.runtime.private.open_regular`:
        no symlink followed, no FIFO waited on, a device refused), at most ``MAX_REPORT_BYTES`` read."""
        try:
            fd = open_regular(self.control / "report.json", os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return _bad_report(f"cannot open report.json ({exc.strerror or exc})")
        try:
            data = os.read(fd, MAX_REPORT_BYTES + 1)
        except OSError as exc:
            return _bad_report(f"cannot read report.json ({exc.strerror or exc})")
        finally:
            os.close(fd)
        if len(data) > MAX_REPORT_BYTES:
            return _bad_report(f"report.json is larger than {MAX_REPORT_BYTES} bytes")
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return _bad_report("report.json is not valid JSON")
        if not isinstance(doc, dict):
            return _bad_report(f"expected a JSON object, got {type(doc).__name__}")
        unknown = sorted(str(k)[:64] for k in doc if k not in REPORT_FIELDS)
        if unknown:
            return _bad_report(f"{unknown[0]}: unknown field (a report has {', '.join(REPORT_FIELDS)})")
        return Report(doc.get("samples"), doc.get("throughput"), doc.get("step"), doc.get("time"))

    def _tail(self, lines: int = 20, max_bytes: int = 16384) -> str:
        """The last ``lines`` lines of this attempt's output (read from the log's last ``max_bytes`` only)."""
        try:
            with os.fdopen(open_regular(self.log_path, os.O_RDONLY, parents=self.log_folders), "rb") as fh:
                fh.seek(max(self.log_start, fh.seek(0, 2) - max_bytes))
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def poll(self) -> WorkerStatus:
        code = None if self.proc is None else self.proc.poll()
        running = self.proc is not None and code is None
        return WorkerStatus(
            rank=self.rank, started=self.proc is not None, running=running, exit_code=code,
            stop_requested=self.stop_asked, report=self._report(),
            log_tail="" if running else self._tail(),
        )

    def terminate(self, grace_s: float = 2.0) -> None:
        """Kill the rank's whole process group (SIGTERM, SIGKILL after ``grace_s``) and clean up.

        The group, not only its first process: a rank that exited (finished, or died of the
        SIGTERM) can leave processes it started (``cmd &``, a launcher's workers, a member that
        ignores SIGTERM) holding the GPU the scheduler hands to the next job."""
        if self.proc is not None and self._group_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            deadline = time.monotonic() + grace_s
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._group_alive():
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.wait()
        shutil.rmtree(self.control, ignore_errors=True)

    def _group_alive(self) -> bool:
        """Whether the rank or any process of its group runs (the group's id is the rank's pid,
        which the OS does not hand out again while the group has members)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            return True
        try:
            os.killpg(self.proc.pid, 0)
        except OSError:  # no such group (or none of it ours to signal)
            return False
        return True
