"""Review of the per-GPU worker (``deepshare.runtime.worker.JobWorker``, a plain class Ray wraps):
what a rank's process tree leaves behind when its run is removed, what a spec's ``env`` may
override, and what the rank's log path may be (the previous attempt's process could replace it).

Without Ray: ``JobWorker`` is driven directly, as ``tests/runtime/test_runtime_worker.py`` does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.worker import JobWorker, WorkerLaunch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and PDEATHSIG: Linux")


def _launch(tmp_path: Path, argv: tuple[str, ...], attempt: int = 1, **extra) -> WorkerLaunch:  # type: ignore[no-untyped-def]
    base = dict(job_id="j-1", attempt=attempt, rank=0, world_size=1, local_rank=0, local_world_size=1,
                master_addr="127.0.0.1", master_port=1, argv=argv, checkpoint_dir=str(tmp_path / "ckpt"),
                working_dir=str(tmp_path), log_path=str(tmp_path / "logs" / "j-1" / "rank-0.log"))
    return WorkerLaunch(**{**base, **extra})


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait(what: str, cond, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


HELPER = """\
import os, signal, sys, time
if sys.argv[1] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[2] + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(120)
"""


def _rank_with_helper(tmp_path: Path, attempt: int, mode: str, leader_then: str) -> tuple[JobWorker, int]:
    """Start a rank whose process (the group leader) starts one helper process, then runs
    ``leader_then``; returns the worker and the helper's pid."""
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    marker = tmp_path / f"helper-{attempt}.pid"
    code = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(helper)!r}, {mode!r}, "
            f"{str(marker)!r}])\n{leader_then}\n")
    worker = JobWorker("j-1", attempt, 0)
    outcome = worker.start(_launch(tmp_path, (sys.executable, "-c", code), attempt=attempt))
    assert outcome.error is None, outcome
    pid = int(_wait("the helper process", lambda: marker.exists() and marker.read_text()))
    return worker, pid


@pytest.fixture
def reaper():
    """pids to SIGKILL after the test, whatever it found (no process is left behind)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_finished_rank_leaves_no_process_of_its_group_running(tmp_path, reaper):
    """A rank whose leader exits 0 while a process it started still runs (a shell's ``cmd &``, a
    launcher that exits before its workers, a data-loader or logging helper): the job is
    ``finished`` and its GPUs go to the next job, so removing the run must end the whole group.
    ``terminate`` signals the group only while the leader itself still runs."""
    worker, helper = _rank_with_helper(tmp_path, 1, "plain", "")
    reaper.append(helper)
    _wait("the leader to exit", lambda: not worker.poll().running)
    assert worker.poll().exit_code == 0
    worker.terminate(grace_s=1.0)
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "a process of the finished rank's group still runs after its run was removed"


def test_a_cancelled_rank_leaves_no_process_that_ignored_sigterm(tmp_path, reaper):
    """Cancel / preemption: SIGTERM to the group, SIGKILL after the grace. When the leader dies of
    the SIGTERM but a member does not (it handles or ignores SIGTERM, or is slow to exit: a CUDA /
    NCCL teardown, a checkpoint in progress), the SIGKILL must still reach the group; it is skipped
    because only the leader's exit is looked at, and the member keeps the GPU the scheduler has
    already handed to the next job."""
    worker, helper = _rank_with_helper(tmp_path, 2, "ignore-term", "time.sleep(120)")
    reaper.append(helper)
    assert worker.poll().running
    worker.terminate(grace_s=1.0)
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "a process of the cancelled rank's group survived terminate()"


def test_a_specs_env_cannot_widen_the_gpus_ray_assigned_the_rank(tmp_path, monkeypatch):
    """Ray sets ``CUDA_VISIBLE_DEVICES`` in the worker actor to the one GPU of its bundle; the
    rank inherits it. A spec's ``env`` ("extra environment variables") is applied over it, so a
    spec carrying ``CUDA_VISIBLE_DEVICES`` (copied from a workstation's shell, say) makes every
    rank of the job see GPUs the scheduler gave other jobs. Either the spec is refused at
    submission, or the worker keeps Ray's assignment."""
    try:
        spec = spec_from_json(dict(name="j", gpus=1, model="DLRM", command=["true"], checkpoint_dir="/tmp/c",
                                   env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}))
    except DeepShareError:
        return  # refused at submission: fine
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # what Ray gives the actor holding GPU 3
    code = "import os; print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', ''))"
    worker = JobWorker("j-1", 1, 0)
    outcome = worker.start(_launch(tmp_path, (sys.executable, "-c", code), env=tuple(sorted(spec.env.items()))))
    if outcome.error is None:
        _wait("the rank to exit", lambda: not worker.poll().running)
    worker.terminate()
    text = (tmp_path / "logs" / "j-1" / "rank-0.log").read_text()
    assert "CVD=0,1,2,3" not in text, "the spec's env replaced the GPU Ray assigned to the rank"


def test_a_fifo_in_place_of_the_rank_log_does_not_hang_the_worker(tmp_path):
    """The rank log's folder is writable by the job's own process (the same user; on a shared
    state folder from any node), so the previous attempt can leave a FIFO at
    ``logs/<job>/rank-<r>.log``. The next attempt's ``start`` opens it for writing and blocks
    until a reader comes: the actor never answers, the launch times out after
    ``--launch-timeout``, and the control loop waits for it meanwhile. It must fail (or
    replace the file) at once, as ``report.json`` is opened without waiting on a FIFO."""
    log = tmp_path / "logs" / "j-1" / "rank-0.log"
    log.parent.mkdir(parents=True)
    os.mkfifo(log)
    worker = JobWorker("j-1", 2, 0)
    done: list[object] = []

    def start() -> None:
        try:
            done.append(worker.start(_launch(tmp_path, ("/bin/true",), attempt=2)))
        except Exception as exc:  # noqa: BLE001 - once released, what it did is not the point
            done.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    thread.join(5)
    blocked = thread.is_alive()
    if blocked:  # let it go: a reader on the FIFO lets the blocked open return
        fd = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(10)
        os.close(fd)
    worker.terminate()
    assert not blocked, "JobWorker.start blocked on a FIFO at the rank's log path"


def test_a_symlink_in_place_of_the_rank_log_is_not_followed(tmp_path):
    """The same folder: a symlink at the log path makes the next attempt append its output (and
    the worker's header line) to whatever file it names, as the scheduler's (Ray's) user."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    log = tmp_path / "logs" / "j-1" / "rank-0.log"
    log.parent.mkdir(parents=True)
    log.symlink_to(outside)
    worker = JobWorker("j-1", 2, 0)
    outcome = worker.start(_launch(tmp_path, (sys.executable, "-c", "print('rank output')"), attempt=2))
    if outcome.error is None:
        _wait("the rank to exit", lambda: not worker.poll().running)
    worker.terminate()
    assert outside.read_text() == "precious\n", "the rank's output was appended to the symlink's target"
