"""The per-GPU worker without Ray (``JobWorker`` is a plain class that Ray wraps): how a rank is
started, why it cannot be, where its log goes, and what it inherits."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

from deepshare.runtime.worker import JobWorker, WorkerLaunch


def launch(tmp_path: Path, argv: tuple[str, ...], attempt: int = 1, **extra) -> WorkerLaunch:
    base = dict(job_id="j-1", attempt=attempt, rank=0, world_size=1, local_rank=0, local_world_size=1,
                master_addr="127.0.0.1", master_port=1, argv=argv, checkpoint_dir=str(tmp_path / "ckpt"),
                working_dir=str(tmp_path), log_path=str(tmp_path / "logs" / "j-1" / "rank-0.log"))
    return WorkerLaunch(**{**base, **extra})


def wait_exit(worker: JobWorker) -> None:
    deadline = time.monotonic() + 30
    while worker.poll().running and time.monotonic() < deadline:
        time.sleep(0.05)


def test_rank_runs_without_the_services_tokens_and_logs_under_the_given_path(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEPSHARE_SCHEDULER_TOKEN", "scheduler-secret-123")
    monkeypatch.setenv("DEEPSHARE_SERVE_TOKEN", "serve-secret-456")
    code = "import os; print(sorted(k for k in os.environ if 'TOKEN' in k)); print(os.environ['MINE'])"
    worker = JobWorker("j-1", 1, 0)
    outcome = worker.start(launch(tmp_path, (sys.executable, "-c", code), env=(("MINE", "kept"),)))
    assert outcome.error is None and outcome.pid
    wait_exit(worker)
    log = tmp_path / "logs" / "j-1" / "rank-0.log"
    text = log.read_text()
    assert "scheduler-secret" not in text and "serve-secret" not in text
    assert "[]\nkept\n" in text and text.startswith("--- deepshare: job j-1 attempt 1 rank 0/1 on ")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.parent.parent.stat().st_mode) == 0o700  # logs/ too, not only the job's folder
    assert worker.poll().exit_code == 0
    worker.terminate()
    assert log.exists()  # the log outlives the worker's control folder
    assert not worker.control.exists()


def test_a_rank_that_cannot_start_says_why(tmp_path):
    missing = JobWorker("j-1", 1, 0).start(launch(tmp_path, ("/nonexistent/bin", "-x")))
    assert missing.pid is None and missing.error == "/nonexistent/bin: No such file or directory"
    assert "deepshare: cannot start rank 0: /nonexistent/bin: No such file or directory" in missing.log_tail
    not_exec = tmp_path / "script.sh"
    not_exec.write_text("#!/bin/sh\n")
    denied = JobWorker("j-1", 2, 0).start(launch(tmp_path, (str(not_exec),), attempt=2))
    assert denied.error == f"{not_exec}: Permission denied"
    no_wd = JobWorker("j-1", 3, 0).start(launch(tmp_path, ("/bin/true",), attempt=3, working_dir="/nonexistent/wd"))
    assert no_wd.error is not None and no_wd.error.startswith("working_dir /nonexistent/wd: no such directory on ")
    (tmp_path / "file").write_text("")
    bad_ckpt = JobWorker("j-1", 4, 0).start(launch(tmp_path, ("/bin/true",), attempt=4,
                                                   checkpoint_dir=str(tmp_path / "file" / "ckpt")))
    assert bad_ckpt.error == f"checkpoint_dir {tmp_path / 'file' / 'ckpt'}: Not a directory"
    # Each outcome's tail is its own attempt's: the fourth does not repeat the first's error.
    assert "/nonexistent/bin" not in bad_ckpt.log_tail and "attempt 4" in bad_ckpt.log_tail
    assert (tmp_path / "logs" / "j-1" / "rank-0.log").read_text().count("--- deepshare: job j-1 attempt") == 4


def test_a_rank_whose_job_log_folder_is_a_link_does_not_start_or_write_through_it(tmp_path):
    """``logs/<job>`` replaced by a link to another job's folder: the rank's output went into the
    other job's log. The rank now does not start, and says why."""
    other = tmp_path / "logs" / "k-2"
    other.mkdir(parents=True)
    (tmp_path / "logs" / "j-1").symlink_to(other)
    outcome = JobWorker("j-1", 1, 0).start(launch(tmp_path, ("/bin/true",)))
    assert outcome.pid is None and outcome.error is not None
    assert outcome.error.startswith(f"cannot open the rank's log {tmp_path / 'logs' / 'j-1' / 'rank-0.log'}: ")
    assert list(other.iterdir()) == []


def test_failed_rank_tail_is_its_own_attempt(tmp_path):
    first = JobWorker("j-1", 1, 0)
    first.start(launch(tmp_path, (sys.executable, "-c", "print('from attempt one')")))
    wait_exit(first)
    second = JobWorker("j-1", 2, 0)
    second.start(launch(tmp_path, (sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"), attempt=2))
    wait_exit(second)
    status = second.poll()
    assert status.exit_code == 3 and "boom" in status.log_tail and "attempt one" not in status.log_tail
    first.terminate()
    second.terminate()


def test_a_rank_that_writes_its_own_stop_file_and_crashes_has_failed_not_stopped(tmp_path):
    """The rank can write its control folder: only the scheduler's request_stop counts as a
    stop, or a crash-looping job would be requeued as preempted forever instead of failing."""
    rogue = JobWorker("j-1", 1, 0)
    rogue.start(launch(tmp_path, ("sh", "-c", 'touch "$DEEPSHARE_CONTROL_DIR/stop"; exit 3')))
    wait_exit(rogue)
    status = rogue.poll()
    assert (rogue.control / "stop").exists() and status.exit_code == 3 and not status.stop_requested
    rogue.terminate()
    asked = JobWorker("j-1", 2, 0)
    asked.start(launch(tmp_path, (sys.executable, "-c", "import time; time.sleep(30)"), attempt=2))
    assert not asked.poll().stop_requested
    asked.request_stop()
    assert asked.poll().stop_requested
    asked.terminate()
