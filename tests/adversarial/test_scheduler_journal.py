"""Careless and hostile state for the live scheduler, no Ray needed: corrupt journal files and rows,
file modes of the journal and the token, bad tokens and flags, and the cancel races of the
journal's state machine. Everything that must fail fails in one line with exit 2 *before* Ray
would start (``start_ray`` is replaced by a function that fails the test if it is reached).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.runtime import service
from deepshare.runtime.journal import JobState, Journal, TransitionError
from deepshare.runtime.models import job_detail, job_out
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.token import TOKEN_ENV, client_token, scheduler_token

ROOT = Path(__file__).resolve().parents[2]
SPEC = dict(name="j", gpus=1, model="DLRM", command=["/bin/true"], checkpoint_dir="/tmp/ckpt")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("Ray must not start")

    monkeypatch.setattr(service, "start_ray", refuse)
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def start(state: Path, *extra: str) -> list[str]:
    return ["scheduler", "start", "--local", "--port", "0", "--state", str(state), "--policy", "fifo+consolidated",
            *extra]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_zero_byte_journal_is_refused_not_replaced(tmp_path):
    state = tmp_path / "s"
    state.mkdir()
    (state / "journal.sqlite").write_bytes(b"")
    # The real command in a subprocess: one line, exit 2, and Ray never started (it would take seconds
    # and print its own lines).
    done = subprocess.run([sys.executable, "-m", "deepshare", *start(state)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != TOKEN_ENV})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"deepshare: error: --state {state}: {state / 'journal.sqlite'} is empty (0 bytes), not a journal; "
        "move it away with its -wal and -shm files to start with a new journal"]
    assert (state / "journal.sqlite").stat().st_size == 0 and not (state / "scheduler.json").exists()


@pytest.mark.parametrize("content", [b"garbage" * 100, b"SQLite format 3\x00" + b"\x01" * 200])
def test_garbage_journal_is_refused(tmp_path, capsys, no_ray, content):
    state = tmp_path / "s"
    state.mkdir()
    (state / "journal.sqlite").write_bytes(content)
    assert main(start(state)) == 2
    assert "journal.sqlite is not a journal" in one_error_line(capsys)
    assert (state / "journal.sqlite").read_bytes() == content


def test_a_damaged_page_is_refused_at_start(tmp_path, capsys, no_ray):
    """SQLite keeps no page checksums: a journal with one overwritten page of its jobs table
    started, and every tick then failed. It is refused at start, and left as it was."""
    state = tmp_path / "s"
    journal = Journal(state)
    for i in range(200):
        journal.submit(spec_from_json({**SPEC, "name": f"j{i}", "env": {"PAD": "x" * 300}}))
    journal.close()
    db = sqlite3.connect(state / "journal.sqlite")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(state / "journal.sqlite", "r+b") as f:  # a page in the middle: the jobs table fills most of them
        f.seek((pages // 2) * size)
        f.write(b"\x0d" + b"\xff" * (size - 1))
    damaged = (state / "journal.sqlite").read_bytes()
    assert main(start(state)) == 2
    line = one_error_line(capsys)
    assert "journal.sqlite is damaged (" in line and line.endswith("restore it from a backup, or move it away with its "
                                                                   "-wal and -shm files to start with a new journal")
    assert (state / "journal.sqlite").read_bytes() == damaged


def test_foreign_sqlite_file_is_refused(tmp_path, capsys, no_ray):
    state = tmp_path / "s"
    state.mkdir()
    db = sqlite3.connect(state / "journal.sqlite")
    db.execute("CREATE TABLE photos (id INTEGER)")
    db.commit()
    db.close()
    assert main(start(state)) == 2
    assert "is not a journal (missing jobs, meta, runs, transitions)" in one_error_line(capsys)


@pytest.mark.parametrize("link", [False, True], ids=["file", "symlink"])
def test_a_refused_journal_is_left_exactly_as_it_was(tmp_path, capsys, no_ray, link):
    """Refusing a SQLite file that is not a journal changes nothing: not its bytes (no switch to WAL
    mode), not its mode (no chmod 0600), no -wal / -shm beside it; through a symlink
    (``journal.sqlite -> elsewhere``) the target is left alone too."""
    state = tmp_path / "s"
    state.mkdir()
    target = tmp_path / "elsewhere.sqlite" if link else state / "journal.sqlite"
    db = sqlite3.connect(target)
    db.execute("CREATE TABLE photos (id INTEGER)")
    db.commit()
    db.close()
    os.chmod(target, 0o644)
    if link:
        (state / "journal.sqlite").symlink_to(target)
    before = target.read_bytes()
    assert main(start(state)) == 2
    assert "is not a journal (missing jobs, meta, runs, transitions)" in one_error_line(capsys)
    assert target.read_bytes() == before and mode(target) == 0o644
    assert sorted(p.name for p in tmp_path.rglob("*sqlite*")) == sorted(
        ["elsewhere.sqlite", "journal.sqlite"] if link else ["journal.sqlite"])


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_lock_file_is_private_whatever_the_umask(tmp_path, umask):
    """Only the scheduler's user may open ``scheduler.lock``: another user who could would hold the
    ``flock`` and keep the scheduler from starting."""
    from deepshare.runtime.statelock import StateLock

    old = os.umask(umask)
    try:
        lock = StateLock(tmp_path / "s").acquire()
    finally:
        os.umask(old)
    assert mode(tmp_path / "s" / "scheduler.lock") == 0o600
    lock.release()


def test_an_existing_lock_file_is_made_private(tmp_path):
    from deepshare.runtime.statelock import StateLock

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "scheduler.lock").write_text("123")
    os.chmod(tmp_path / "s" / "scheduler.lock", 0o666)
    lock = StateLock(tmp_path / "s").acquire()
    assert mode(tmp_path / "s" / "scheduler.lock") == 0o600
    lock.release()


def test_an_address_where_no_ray_answers_is_exit_2_as_documented(tmp_path, capsys):
    """docs/scheduler.md: an ``--address`` where no Ray answers is one line and exit 2 before
    anything starts, like a malformed one and as for every command that takes ``--address``
    (the runtime README said exit 1)."""
    import socket

    import ray

    ray.shutdown()  # this process joins the address itself: no connection left from other tests
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = ["scheduler", "start", "--address", f"127.0.0.1:{port}", "--port", "0", "--state", str(tmp_path / "s"),
            "--policy", "fifo+consolidated"]
    assert main(argv) == 2
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers there" in one_error_line(capsys)
    assert main([*argv[:3], "nonsense", *argv[4:]]) == 2  # a malformed address is the user's input
    assert "expected 'auto' or HOST:PORT" in one_error_line(capsys)


def test_state_folder_made_by_the_lock_is_private_whatever_the_umask(tmp_path):
    """``scheduler start`` takes the state lock before it opens the journal, so the lock makes the
    folder (and any missing parent): 0700 even under umask 0; existing folders keep their mode."""
    from deepshare.runtime.statelock import StateLock

    (tmp_path / "shared").mkdir(mode=0o755)
    os.chmod(tmp_path / "shared", 0o755)
    state = tmp_path / "shared" / "new" / "sched"
    old = os.umask(0)
    try:
        lock = StateLock(state).acquire()
    finally:
        os.umask(old)
    assert mode(state) == 0o700 and mode(state.parent) == 0o700
    assert mode(tmp_path / "shared") == 0o755
    lock.release()


def test_journal_token_and_state_are_private(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    old = os.umask(0)  # the most permissive umask: modes must not depend on it
    try:
        state = tmp_path / "s"
        journal = Journal(state)
        journal.submit(spec_from_json(SPEC))
        token, path = scheduler_token(state)
    finally:
        os.umask(old)
    assert mode(state) == 0o700 and mode(state / "journal.sqlite") == 0o600
    assert mode(state / "journal.sqlite-wal") == 0o600
    assert path == state / "token" and mode(path) == 0o600 and path.read_text() == token + "\n"
    assert len(token) >= 32 and not list(state.glob(".token*"))  # no temporary left behind
    assert client_token(None, state, environ={}) == token
    token2, _ = scheduler_token(state)
    assert token2 != token and client_token(None, state, environ={}) == token2  # a new one at each start
    journal.close()
    os.chmod(state / "journal.sqlite", 0o644)  # a journal made readable by someone else is tightened again
    Journal(state).close()
    assert mode(state / "journal.sqlite") == 0o600


def test_environment_token_is_never_written_and_removes_a_stale_file(tmp_path):
    state = tmp_path / "s"
    state.mkdir()
    (state / "token").write_text("stale-token-value\n")
    token, path = scheduler_token(state, environ={TOKEN_ENV: "from-the-env-123"})
    assert token == "from-the-env-123" and path is None and not (state / "token").exists()
    assert client_token(None, state, environ={TOKEN_ENV: "x" * 9}) == "x" * 9
    assert client_token("flag-token", state, environ={TOKEN_ENV: "x" * 9}) == "flag-token"


@pytest.mark.parametrize("where", ["flag", "env", "file"])
@pytest.mark.parametrize("bad, why", [
    ("abcdefgh\nX-Evil: 1", "at most 4096 printable ASCII characters without spaces"),
    ("abc defgh", "at most 4096 printable ASCII characters without spaces"),
    ("short", "at least 8 characters, got 5"),
])
def test_client_token_that_cannot_be_a_header_is_one_line(tmp_path, capsys, monkeypatch, where, bad, why):
    """A pasted line break or space in a client's token was a urllib traceback; now it is one line
    naming where the token came from, before anything is sent."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    state = tmp_path / "s"
    state.mkdir()
    argv = ["jobs", "--url", "http://127.0.0.1:9", "--state", str(state)]
    source = {"flag": "--token", "env": f"${TOKEN_ENV}", "file": str(state / "token")}[where]
    if where == "flag":
        argv += ["--token", bad]
    elif where == "env":
        monkeypatch.setenv(TOKEN_ENV, bad)
    else:
        (state / "token").write_text(bad + "\n")
        (state / "scheduler.json").write_text('{"url": "http://127.0.0.1:9"}')  # its token goes to that URL alone
    assert main(argv) == 2
    assert one_error_line(capsys) == f"deepshare: error: {source}: the token must {'have ' if 'least' in why else 'be '}{why}"


def test_short_environment_token_is_one_line_before_ray(tmp_path, capsys, no_ray, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "short")
    assert main(start(tmp_path / "s")) == 2
    assert one_error_line(capsys) == (f"deepshare: error: ${TOKEN_ENV}: the token must have at least 8 characters, "
                                      "got 5")


def test_client_without_any_token_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for argv in (["jobs"], ["cancel", "x-1"], ["logs", "x-1"], ["submit", str(ROOT / "examples/jobs/tiny.yaml")]):
        assert main([*argv, "--url", "http://127.0.0.1:9", "--state", str(tmp_path / "none")]) == 2
        assert "no scheduler token for this --url: give --token" in one_error_line(capsys)
    assert main(["jobs", "--state", str(tmp_path / "none"), "--token", "t" * 10]) == 2
    assert "no --url, and no scheduler has written" in one_error_line(capsys)


@pytest.mark.parametrize("flags, message", [
    (["--interval", "1e10"], "--interval: expected a number of seconds in [0.001, 86400]"),
    (["--interval", "5e-324"], "--interval: expected a number of seconds in [0.001, 86400]"),
    (["--preempt-grace", "inf"], "--preempt-grace: expected a number of seconds"),
    (["--launch-timeout", "nan"], "--launch-timeout: expected a number of seconds"),
    (["--max-launch-attempts", "0"], "--max-launch-attempts: expected a positive integer"),
    (["--decision-timeout", "0"], "--decision-timeout: expected a number of seconds in [0.001, 86400]"),
])
def test_out_of_range_flags_are_one_line(tmp_path, capsys, no_ray, flags, message):
    with pytest.raises(SystemExit) as exit_:
        main(start(tmp_path / "s", *flags))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_ray_that_cannot_start_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    """A Ray start that times out (here: the local cluster raises as Ray does) is exit 1, no traceback."""
    import deepshare.runtime.localcluster as lc

    monkeypatch.delenv(TOKEN_ENV, raising=False)

    def timeout(self):
        raise TimeoutError("Timed out after 60 seconds waiting for the GCS to start\nmore detail")

    monkeypatch.setattr(lc.LocalCluster, "start", timeout)
    assert main(start(tmp_path / "s")) == 1
    assert one_error_line(capsys) == ("deepshare: error: could not start the local Ray cluster (TimeoutError: "
                                      "Timed out after 60 seconds waiting for the GCS to start)")


def test_non_loopback_host_warns_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)

    def stop_here(*_a, **_k):
        raise service.RuntimeFailure("stopped by the test")

    monkeypatch.setattr(service, "start_ray", stop_here)
    assert main(start(tmp_path / "s", "--host", "0.0.0.0")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("warning: --host 0.0.0.0 exposes the scheduler's API, which runs any command as user ")
    assert "without TLS" in err[0] and len(err) == 2
    assert main(start(tmp_path / "t", "--host", "127.0.0.1")) == 1
    assert "warning" not in capsys.readouterr().err


# -- corrupt rows ------------------------------------------------------------------------------
@pytest.mark.parametrize("column, value, why", [
    ("spec", "{not json", "Invalid JSON"),
    ("spec", json.dumps({**SPEC, "gpus": True}), "gpus"),
    ("spec", json.dumps({**SPEC, "command": None, "entrypoint": None}), "exactly one of entrypoint"),
    ("state", "zombie", "'zombie' is not a valid JobState"),
    ("placement", "[[", "Expecting value"),
    ("placement", "[" * 100_000 + "]" * 100_000, "placement: JSON nested too deeply"),
    ("placement", '[["node0", 1e999]]', "is not a [node name, GPUs from 1 to 4096] pair"),
    ("placement", '[["node0", 2.0]]', "is not a [node name, GPUs from 1 to 4096] pair"),
    ("placement", '[["node0", -3], ["node1", 5]]', "is not a [node name, GPUs from 1 to 4096] pair"),
    ("placement", "[]", "does not hold the running job's 2 GPUs"),
    ("placement", None, "does not hold the running job's 2 GPUs"),
    ("placement", '{"node0": 2}', "placement: not a list"),
    ("attempt", "abc", "attempt: 'abc' is not a whole number from 0"),
    ("attempt", 1.5, "attempt: '1.5' is not a whole number"),
    ("attempt", 2**63 - 1, "attempt: '9223372036854775807' is not a whole number"),
    ("attempt", 0, "attempt: 0 for a running job"),
    ("seq", "x", "seq: 'x' is not a whole number from 1"),
    ("preemptions", "many", "preemptions: 'many' is not a whole number"),
    ("run_started", "abc", "run_started: 'abc' is not a finite number"),
    ("submit_time", float("inf"), "submit_time: 'inf' is not a finite number"),
    ("queued_since", "soon", "queued_since: 'soon' is not a finite number"),
    ("last_run_s", -5.0, "last_run_s: '-5.0' is not a finite number of 0 or more"),
    ("attained_gpu_s", "lots", "attained_gpu_s: 'lots' is not a finite number"),
    ("finish_time", "later", "finish_time: 'later' is not a finite number"),
])
def test_a_bad_row_is_quarantined_and_the_rest_works(tmp_path, column, value, why):
    journal = Journal(tmp_path / "s")
    good = journal.submit(spec_from_json({**SPEC, "name": "good"}))
    bad = journal.submit(spec_from_json({**SPEC, "name": "bad", "gpus": 2}))
    journal.start_run(bad.job_id, (("node0", 2),), None)
    other = sqlite3.connect(tmp_path / "s" / "journal.sqlite")  # someone edits the file under the scheduler
    other.execute(f"UPDATE jobs SET {column}=? WHERE id=?", (value, bad.job_id))
    other.commit()
    other.close()
    jobs = {j.job_id: j for j in journal.jobs()}
    assert jobs[good.job_id].state is JobState.QUEUED
    q = jobs[bad.job_id]
    assert q.state is JobState.FAILED and q.error.startswith("quarantined: its journal row cannot be read (")
    assert why in q.error
    assert [j.job_id for j in journal.jobs(JobState.RUNNING)] == []  # the loop no longer sees it running
    assert [j.job_id for j in journal.jobs(JobState.QUEUED)] == [good.job_id]
    out = job_out(journal.get(bad.job_id))  # what GET /v1/jobs answers for it
    assert out.state == "failed" and out.name == "bad"
    detail = job_detail(journal.get(bad.job_id), journal.runs(bad.job_id), journal.transitions(bad.job_id),
                        checkpoint_dir=journal.run_names.checkpoint_dir(journal.get(bad.job_id).spec, bad.job_id))
    reasons = [t.reason for t in detail.transitions]
    assert sum(r.startswith("quarantined") for r in reasons) == 1  # read three times, quarantined once
    with pytest.raises(TransitionError):
        journal.cancel(bad.job_id)
    (run,) = journal.runs(bad.job_id)
    assert run.end_reason.startswith("quarantined")
    if column == "state":  # 'zombie' is not running: nothing to remove from the cluster
        assert run.ended is not None and journal.orphans() == []
    else:  # it was running: its run stays open, for the loop to remove (ranks as its run's placement says)
        assert run.ended is None and journal.orphans() == [(bad.job_id, 1, 2)]
        journal.close()
        journal = Journal(tmp_path / "s")  # a scheduler that died before removing it still removes it
        assert journal.orphans() == [(bad.job_id, 1, 2)]
        journal.orphan_removed(bad.job_id, 1)
        (run,) = journal.runs(bad.job_id)
        assert run.ended is not None and journal.orphans() == []
    journal.close()
    reopened = Journal(tmp_path / "s")  # and after a restart
    assert reopened.get(bad.job_id).state is JobState.FAILED and reopened.get(good.job_id).state is JobState.QUEUED
    assert reopened.orphans() == []
    reopened.close()


def test_a_deep_placement_in_runs_and_transitions_is_skipped_by_every_reader(tmp_path, capsys):
    """``calibrate --from-state`` reads the runs' placements: a tampered one nested 100,000 deep
    was a RecursionError traceback; it is now a skipped row, as any other unreadable one."""
    journal = Journal(tmp_path / "s")
    job = journal.submit(spec_from_json({**SPEC, "name": "deep", "gpus": 2}))
    journal.start_run(job.job_id, (("node0", 2),), 10.0)
    journal.record_progress(job.job_id, 1, 100.0, 10, 5.0, 10.0)
    journal.close()
    deep = "[" * 100_000 + "]" * 100_000
    other = sqlite3.connect(tmp_path / "s" / "journal.sqlite")
    other.execute("UPDATE runs SET placement=?", (deep,))
    other.execute("UPDATE transitions SET placement=? WHERE placement IS NOT NULL", (deep,))
    other.commit()
    other.close()
    journal = Journal(tmp_path / "s")
    assert journal.measurements(10) == [] and journal.runs(job.job_id) == []
    assert [t.to_state for t in journal.transitions(job.job_id)] == [JobState.QUEUED]
    journal.close()
    assert main(["calibrate", "--from-state", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    assert "learned contention fitted to 0 measured run(s)" in out and err == ""


def test_calibrate_from_state_changes_nothing_in_the_journal(tmp_path, capsys):
    """``calibrate --from-state`` is documented read-only (a running scheduler may own the
    journal): it opened it as the scheduler does, which chmods the file and could upgrade its
    schema. An older journal (no queue column) is read as it is, its file and mode untouched."""
    state = tmp_path / "s"
    journal = Journal(state)
    job = journal.submit(spec_from_json({**SPEC, "name": "a", "gpus": 2}))
    journal.start_run(job.job_id, (("node0", 2),), 10.0)
    journal.record_progress(job.job_id, 1, 100.0, 10, 5.0, 10.0)
    journal.close()
    db = sqlite3.connect(state / "journal.sqlite")
    db.executescript("DROP INDEX jobs_by_queue; DROP INDEX jobs_by_queue_state; DROP INDEX jobs_by_state;"
                     " ALTER TABLE jobs DROP COLUMN queue; PRAGMA wal_checkpoint(TRUNCATE);")
    db.close()
    os.chmod(state / "journal.sqlite", 0o640)
    before = (state / "journal.sqlite").read_bytes()
    assert main(["calibrate", "--from-state", str(state)]) == 0
    assert "learned contention fitted to 1 measured run(s)" in capsys.readouterr().out
    assert stat.S_IMODE((state / "journal.sqlite").stat().st_mode) == 0o640
    assert (state / "journal.sqlite").read_bytes() == before


# -- cancel races ------------------------------------------------------------------------------
def test_cancel_during_a_failing_launch_is_not_lost(tmp_path):
    journal = Journal(tmp_path / "s")
    job = journal.submit(spec_from_json(SPEC))
    attempt = journal.start_run(job.job_id, (("node0", 1),), None)  # a launch in flight
    assert journal.cancel(job.job_id) is JobState.RUNNING  # 202: marked
    journal.end_run(job.job_id, attempt, JobState.QUEUED, "launch failed: rank 0 could not start")
    after = journal.get(job.job_id)
    assert after.state is JobState.CANCELLED and after.finish_time is not None and after.preemptions == 0
    assert journal.transitions(job.job_id)[-1].reason == "launch failed: rank 0 could not start; cancelled"
    with pytest.raises(TransitionError):
        journal.start_run(job.job_id, (("node0", 1),), None)
    journal.close()


def test_cancel_of_a_queued_job_is_immediate_and_final(tmp_path):
    journal = Journal(tmp_path / "s")
    job = journal.submit(spec_from_json(SPEC))
    assert journal.cancel(job.job_id) is JobState.CANCELLED
    with pytest.raises(TransitionError, match="already cancelled"):
        journal.cancel(job.job_id)
    with pytest.raises(TransitionError):
        journal.start_run(job.job_id, (("node0", 1),), None)
    with pytest.raises(KeyError):
        journal.cancel("nope-1")
    journal.close()


def test_launch_failures_count_only_consecutive_failed_launches(tmp_path):
    journal = Journal(tmp_path / "s")
    job = journal.submit(spec_from_json(SPEC)).job_id
    assert journal.launch_failures(job) == (0, None)
    a = journal.start_run(job, (("node0", 1),), None)
    journal.end_run(job, a, JobState.QUEUED, "launch failed: x")
    a = journal.start_run(job, (("node0", 1),), None)
    journal.end_run(job, a, JobState.QUEUED, "launch waited: GPUs not granted")  # a wait is not a failure...
    assert journal.launch_failures(job)[0] == 0  # ...and it breaks the run of failures
    for _ in range(2):
        a = journal.start_run(job, (("node0", 1),), None)
        journal.end_run(job, a, JobState.QUEUED, "launch failed: y")
    count, last = journal.launch_failures(job)
    assert count == 2 and last == journal.runs(job)[-1].ended
    journal.start_run(job, (("node0", 1),), None)  # the launch in flight (not ended) is not counted
    assert journal.launch_failures(job) == (2, last)
    journal.close()


def test_the_scheduler_docs_say_the_exit_code_the_cli_gives():
    text = " ".join((ROOT / "docs" / "scheduler.md").read_text().split())
    assert "an `--address` where no Ray answers or that refuses the connection is" in text
    assert "one line and exit 2 before anything starts" in text


def test_the_decision_timeout_reaches_the_loop(tmp_path, monkeypatch):
    from deepshare.runtime.defaults import DEFAULT_DECISION_TIMEOUT_S

    seen = []
    monkeypatch.setattr(service, "run_scheduler", lambda config, policy, **_: seen.append(config.loop) or 0)
    assert main(start(tmp_path / "a", "--decision-timeout", "7.5")) == 0
    assert main(start(tmp_path / "b")) == 0
    assert [loop.decision_timeout_s for loop in seen] == [7.5, DEFAULT_DECISION_TIMEOUT_S]


@pytest.mark.parametrize("value", ["x", b"\x00", 1.5, 2**62])
def test_submissions_go_on_after_an_edited_seq(tmp_path, value):
    """A text seq sorted above every number: the next job got seq 1 and every later submission
    failed on the unique seq."""
    journal = Journal(tmp_path / "s")
    first = journal.submit(spec_from_json({**SPEC, "name": "a"}))
    journal.submit(spec_from_json({**SPEC, "name": "b"}))
    other = sqlite3.connect(tmp_path / "s" / "journal.sqlite")
    other.execute("UPDATE jobs SET seq=? WHERE id=?", (value, first.job_id))
    other.commit()
    other.close()
    later = [journal.submit(spec_from_json({**SPEC, "name": f"c{i}"})) for i in range(3)]
    seqs = [job.seq for job in later]
    assert len(set(seqs)) == 3 and seqs == sorted(seqs) and all(s > 2 for s in seqs)
    assert [j.state for j in later] == [JobState.QUEUED] * 3
    journal.close()


def test_a_seq_edited_to_the_largest_integer_is_one_line(tmp_path):
    journal = Journal(tmp_path / "s")
    first = journal.submit(spec_from_json({**SPEC, "name": "a"}))
    other = sqlite3.connect(tmp_path / "s" / "journal.sqlite")
    other.execute("UPDATE jobs SET seq=? WHERE id=?", (2**63 - 1, first.job_id))
    other.commit()
    other.close()
    with pytest.raises(DeepShareError, match=r"job numbers are used up \(the last is 9223372036854775807\)"):
        journal.submit(spec_from_json({**SPEC, "name": "b"}))
    assert [j.job_id for j in journal.jobs()] == [first.job_id]
    journal.close()
