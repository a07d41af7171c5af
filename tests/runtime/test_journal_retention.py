"""A long-lived journal: reads that stay cheap as it grows, and ``--keep-finished`` pruning.

The live history's per-tick read of the jobs finished since the last tick, the contention
learner's read of the newest runs and a job's transitions each go through an index (they walked
or sorted the whole journal). ``--keep-finished DAYS`` deletes the jobs that ended more than DAYS
ago, with their transitions, runs and logs folders, and never lets a job number be used twice.
The ``clock`` and ``journal`` fixtures are this folder's (``conftest.py``).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from deepshare.runtime.defaults import DAY_S
from deepshare.runtime.journal import INDEX_NAMES, PRUNE_BATCH, JobState, Journal
from deepshare.runtime.logs import LOGS_DIR, rank_log_path, remove_job_logs
from deepshare.runtime.retention import Retention
from deepshare.runtime.spec import spec_from_json

SPEC = dict(gpus=1, model="DLRM", entrypoint="m:f", checkpoint_dir="/c")


def submit(journal: Journal, name: str = "j") -> str:
    return journal.submit(spec_from_json({**SPEC, "name": name})).job_id


def finish(journal: Journal, clock: Any, job_id: str, state: JobState = JobState.FINISHED, after: float = 10.0) -> None:
    attempt = journal.start_run(job_id, (("node0", 1),), 5.0)
    clock.t += after
    journal.end_run(job_id, attempt, state, state.value)


def write_log(state: Path, job_id: str, text: str = "hello\n") -> Path:
    path = rank_log_path(state, job_id, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def plans(journal: Journal, read) -> list[str]:
    """The query plan of each SELECT that ``read(journal)`` runs (traced with its values bound in)."""
    statements: list[str] = []
    journal._db.set_trace_callback(statements.append)
    try:
        read(journal)
    finally:
        journal._db.set_trace_callback(None)
    return [" | ".join(row[-1] for row in journal._db.execute("EXPLAIN QUERY PLAN " + sql))
            for sql in statements if sql.lstrip().upper().startswith("SELECT")]


# -- reads that stay cheap ---------------------------------------------------------------------
@pytest.mark.parametrize(("read", "index"), [
    (lambda j: j.finished((1000.0, 1)), "INDEX jobs_by_state_finish (state=? AND (finish_time,seq)>(?,?))"),
    (lambda j: j.finished(), "INDEX jobs_by_state_finish (state=?)"),
    (lambda j: j.measurements(10), "SCAN r USING INDEX runs_by_start"),
    (lambda j: j.transitions("j-1"), "INDEX transitions_by_job (job_id=?)"),
    (lambda j: j.prune(5000.0), "INDEX jobs_by_state_finish (state=? AND finish_time<?)"),
    (lambda j: j.orphans(), "SCAN r USING INDEX runs_open"),  # every tick: not a walk of every failed job
    (lambda j: j.delete_ended([f"j-{i}" for i in range(1, 401)]), "INDEX sqlite_autoindex_jobs_1 (id=?)"),  # not a walk
])
def test_the_per_tick_and_per_refit_reads_go_through_an_index(journal, clock, read, index):
    """Without these indexes the live history's read (every tick) walked every finished job
    (80 ms a tick with 300,000), and the learner's read sorted every run (730 ms, under the
    journal's lock). A range of the index, not a walk of it in order: the history's read of the
    jobs after a mark was ``finish_time > ? OR (...)``, which SQLite reads as a walk of every
    finished job even with the index."""
    finish(journal, clock, submit(journal))
    submit(journal)
    found = plans(journal, read)
    assert found and index in found[0].split(" | ")[0], found
    steps = [step for p in found for step in p.split(" | ")]
    assert all("TEMP B-TREE" not in step and ("USING" in step or not step.startswith("SCAN")) for step in steps), found


def test_finished_after_a_mark_keeps_its_order_on_equal_finish_times(journal, clock):
    ids = [submit(journal, f"f{i}") for i in range(4)]
    for job_id in ids[:3]:  # three finish at the same time, in submission order
        attempt = journal.start_run(job_id, (("node0", 1),), None)
        journal.end_run(job_id, attempt, JobState.FINISHED, "finished")
    finish(journal, clock, ids[3])
    assert [j.job_id for j in journal.finished()] == ids
    first = journal.get(ids[0])
    assert [j.job_id for j in journal.finished((first.finish_time, first.seq))] == ids[1:]
    assert [j.job_id for j in journal.finished((first.finish_time, first.seq), limit=1)] == ids[1:2]
    last = journal.get(ids[3])
    assert journal.finished((last.finish_time, last.seq)) == []


def test_an_older_journal_gets_the_new_indexes(tmp_path):
    state = tmp_path / "state"
    Journal(state).close()
    db = sqlite3.connect(state / "journal.sqlite")
    db.executescript("DROP INDEX jobs_by_state_finish; DROP INDEX runs_by_start; DROP INDEX transitions_by_job;")
    db.close()
    journal = Journal(state)
    try:
        assert INDEX_NAMES <= {r[0] for r in journal._db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"jobs_by_state_finish", "runs_by_start", "transitions_by_job"} <= INDEX_NAMES
    finally:
        journal.close()


# -- pruning -----------------------------------------------------------------------------------
def test_prune_deletes_jobs_ended_before_the_cutoff_with_their_transitions_and_runs(journal, clock):
    old_done, old_failed, old_cancelled = submit(journal, "a"), submit(journal, "b"), submit(journal, "c")
    finish(journal, clock, old_done)                                   # ends at 1010
    finish(journal, clock, old_failed, JobState.FAILED)                # 1020
    journal.cancel_queued(old_cancelled)                               # 1020
    queued, running, recent = submit(journal, "q"), submit(journal, "r"), submit(journal, "n")
    journal.start_run(running, (("node1", 1),), None)
    clock.t = 2000.0
    finish(journal, clock, recent)                                     # 2010
    newest = submit(journal, "z")                                      # the highest number: queued
    assert sorted(journal.prune(1500.0)) == sorted([old_done, old_failed, old_cancelled])
    left = {j.job_id for j in journal.jobs()}
    assert left == {queued, running, recent, newest}
    for gone in (old_done, old_failed, old_cancelled):
        with pytest.raises(KeyError):
            journal.get(gone)
        assert journal.transitions(gone) == [] and journal.runs(gone) == []
    assert [t.reason for t in journal.transitions(recent)] == ["submitted", "launched", "finished"]
    assert journal.prune(1500.0) == []  # nothing more before the cutoff
    assert journal.prune(2011.0) == [recent]


def test_a_pruned_newest_job_never_gives_its_number_to_the_next(journal, clock):
    """The next job's number follows the highest in the journal: deleting the newest job would
    hand its id, and with it its log folder and checkpoint folder, to the next submission."""
    first, second = submit(journal), submit(journal)
    finish(journal, clock, first)
    finish(journal, clock, second)
    clock.t += DAY_S
    assert journal.prune(clock.t) == [first]  # j-2, the highest number, is kept
    assert submit(journal) == "j-3"
    clock.t += 1
    journal.cancel_queued("j-3")
    assert journal.prune(clock.t + 1) == [second]
    assert submit(journal) == "j-4"


def test_a_quarantined_jobs_open_run_keeps_it_until_the_run_is_removed(tmp_path, journal, clock):
    bad = submit(journal, "bad")
    journal.start_run(bad, (("node0", 1),), None)
    submit(journal, "later")
    other = sqlite3.connect(tmp_path / "state" / "journal.sqlite")
    other.execute("UPDATE jobs SET spec='{broken' WHERE id=?", (bad,))
    other.commit()
    other.close()
    assert journal.get(bad).state is JobState.FAILED and journal.orphans() == [(bad, 1, 1)]
    clock.t += DAY_S
    assert journal.prune(clock.t) == []  # its run may still be on the cluster
    journal.orphan_removed(bad, 1)
    assert journal.prune(clock.t) == [bad]


def test_prune_takes_at_most_its_limit_the_earliest_ended_first(journal, clock):
    ids = [submit(journal) for _ in range(6)]
    for job_id in reversed(ids[:5]):  # j-5 ends first, j-1 last
        finish(journal, clock, job_id)
    assert journal.prune(clock.t + 1, limit=2) == [ids[4], ids[3]]
    assert journal.prune(clock.t + 1, limit=0) == []
    assert sorted(journal.prune(clock.t + 1)) == sorted(ids[:3])


# -- logs folders ------------------------------------------------------------------------------
def test_remove_job_logs_removes_the_jobs_folder_only(tmp_path):
    state = tmp_path / "state"
    mine, other = write_log(state, "a-1"), write_log(state, "a-2")
    (mine.parent / "rank-1.log").write_text("x")
    remove_job_logs(state, "a-1")
    assert not mine.parent.exists() and other.read_text() == "hello\n"
    remove_job_logs(state, "a-1")  # nothing left: nothing to do
    remove_job_logs(tmp_path / "no-state", "a-1")
    with pytest.raises(ValueError):
        remove_job_logs(state, "../a-2")


def test_remove_job_logs_follows_no_link(tmp_path):
    """A job's process can write its logs folder: a link in place of its folder is removed, not
    what it points to, and a link in place of ``logs`` is not followed at all."""
    state, victim = tmp_path / "state", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    write_log(state, "a-2")
    (state / LOGS_DIR / "a-1").symlink_to(victim, target_is_directory=True)
    remove_job_logs(state, "a-1")
    assert not os.path.lexists(state / LOGS_DIR / "a-1") and (victim / "keep.txt").read_text() == "mine"

    outside = tmp_path / "outside"
    (outside / "a-3").mkdir(parents=True)
    (outside / "a-3" / "rank-0.log").write_text("not the scheduler's")
    other = tmp_path / "other-state"
    other.mkdir()
    (other / LOGS_DIR).symlink_to(outside, target_is_directory=True)
    remove_job_logs(other, "a-3")
    assert (outside / "a-3" / "rank-0.log").read_text() == "not the scheduler's"


@pytest.fixture
def nest():
    """``nest(folder, depth)``: ``depth`` folders one in another under ``folder`` (what a job's
    process can make in its own); removed after the test by ``rm -rf`` (pytest's own clean-up of
    old temporary folders is shutil.rmtree, which a tree this deep stops with RecursionError)."""
    made: list[Path] = []

    def nest_(folder: Path, depth: int) -> None:
        made.append(folder)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(depth):
                os.mkdir("d", dir_fd=fd)
                inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = inner
        finally:
            os.close(fd)

    yield nest_
    subprocess.run(["rm", "-rf", "--", *map(str, made)], check=True)


def test_remove_job_logs_of_a_deeply_nested_folder_is_an_oserror(tmp_path, nest):
    """shutil.rmtree recursed once a level: a job that nested its logs folder past Python's
    recursion limit made the removal raise RecursionError, past the retention's handler into the
    tick."""
    state = tmp_path / "state"
    folder = write_log(state, "a-1").parent
    nest(folder, 1200)
    with pytest.raises(OSError, match="nested more than"):
        remove_job_logs(state, "a-1")
    shallow = write_log(state, "a-2").parent
    nest(shallow, 3)
    remove_job_logs(state, "a-2")
    assert not shallow.exists()


def test_remove_job_logs_never_opens_what_a_link_swapped_in_points_to(tmp_path, monkeypatch):
    """The job's folder replaced by a link to a FIFO right after the scheduler first looked at
    it: rmtree opened the name again following the link, and the control loop waited on the FIFO
    for good."""
    state = tmp_path / "state"
    folder = write_log(state, "a-1").parent
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    real_lstat, real_open, swapped = os.lstat, os.open, []

    def swap() -> None:
        if not swapped:
            swapped.append(True)
            os.rename(folder, folder.parent / "moved")
            os.symlink(fifo, folder)

    def lstat(path, *args, **kwargs):
        result = real_lstat(path, *args, **kwargs)
        if path == "a-1":
            swap()
        return result

    def open_(path, flags, *args, **kwargs):
        result = real_open(path, flags, *args, **kwargs)
        if path == "a-1":
            swap()
        return result

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "open", open_)
    outcome: list[object] = []

    def remove() -> None:
        try:
            remove_job_logs(state, "a-1")
            outcome.append(None)
        except OSError as exc:  # the folder moved away under it: said, not followed
            outcome.append(exc)

    worker = threading.Thread(target=remove, daemon=True)
    worker.start()
    worker.join(5.0)
    monkeypatch.undo()
    if worker.is_alive():  # blocked opening the FIFO: let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5.0)
        pytest.fail("remove_job_logs opened the FIFO a link swapped in for the job's folder points to")
    assert swapped and len(outcome) == 1 and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_retention_goes_on_past_a_logs_folder_it_cannot_remove(tmp_path, journal, clock, caplog, nest):
    state = tmp_path / "state"
    a, b = submit(journal, "a"), submit(journal, "b")
    submit(journal, "c")  # the highest number: kept
    nest(write_log(state, a).parent, 1200)
    write_log(state, b)
    finish(journal, clock, a)
    finish(journal, clock, b)
    clock.t += 100.0
    assert sorted(Retention(keep_s=10.0).prune(journal)) == [a, b]
    assert not rank_log_path(state, b, 0).parent.exists()
    assert f"job {a}: its logs folder was not removed" in caplog.text


# -- the retention the control loop runs --------------------------------------------------------
def test_retention_prunes_once_a_minute_and_removes_logs(tmp_path, journal, clock):
    state = tmp_path / "state"
    retention = Retention(keep_s=10.0)
    a, b = submit(journal, "a"), submit(journal, "b")  # b, the highest number, is kept anyway
    write_log(state, a)
    finish(journal, clock, a)  # ends at 1010
    assert retention.prune(journal) == []  # ended just now
    clock.t += 30.0
    assert retention.prune(journal) == []  # old enough, but the last prune was 30 s ago (journal clock)
    clock.t += 31.0
    assert retention.prune(journal) == [a]
    assert not rank_log_path(state, a, 0).parent.exists()
    assert [j.job_id for j in journal.jobs()] == [b]


def test_retention_spends_its_budget_then_leaves_the_rest_to_the_next_prune(journal, clock, monkeypatch):
    calls = []

    def prunable(ended_before: float, limit: int) -> list[str]:
        calls.append(limit)
        return [f"x-{len(calls)}-{i}" for i in range(limit)]  # always a full batch: a long backlog

    monkeypatch.setattr(journal, "prunable", prunable)
    monkeypatch.setattr(journal, "delete_ended", list)
    ticks = iter(range(100))
    retention = Retention(keep_s=1.0, budget_s=2.5, clock=lambda: float(next(ticks)))
    assert len(retention.prune(journal)) == 3 * PRUNE_BATCH and calls == [PRUNE_BATCH] * 3


def test_the_control_loop_prunes_with_keep_finished(tmp_path):
    from test_control_loop import Rig

    from deepshare.policies import make_policy

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), keep_finished_s=DAY_S)
    a = rig.submit("a", 1)
    rig.loop.tick()
    write_log(rig.state_dir, a)
    rig.fake.finish(a)
    assert rig.loop.tick().ended == ((a, "finished"),)
    b = rig.submit("b", 1)  # the highest number: a can go
    rig.loop.tick()
    rig.clock.t += DAY_S - 10
    rig.loop.tick()
    assert rig.state(a) is JobState.FINISHED  # less than a day ago
    rig.clock.t += 120
    rig.loop.tick()
    with pytest.raises(KeyError):
        rig.journal.get(a)
    assert not rank_log_path(rig.state_dir, a, 0).parent.exists()
    assert rig.state(b) is JobState.RUNNING


def test_without_keep_finished_nothing_is_pruned(tmp_path):
    from test_control_loop import Rig

    from deepshare.policies import make_policy

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"))
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.finish(a)
    rig.loop.tick()
    rig.submit("b", 1)
    rig.clock.t += 1000 * DAY_S
    rig.loop.tick()
    assert rig.loop.retention is None and rig.state(a) is JobState.FINISHED


# -- the flag ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "36501", "week"])
def test_keep_finished_refuses_what_is_not_a_number_of_days(capsys, value):
    from deepshare.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["scheduler", "start", "--keep-finished", value])
    assert exit_.value.code == 2
    assert "--keep-finished: expected a number above 0 and at most 36,500 days" in capsys.readouterr().err


def test_keep_finished_reaches_the_loop_in_seconds(monkeypatch, tmp_path):
    import deepshare.runtime.service as service
    from deepshare.cli import main

    seen = []
    monkeypatch.setattr(service, "run_scheduler", lambda config, policy, **_: seen.append(config) or 0)
    common = ["scheduler", "start", "--policy", "fifo+consolidated", "--state", str(tmp_path / "s")]
    assert main([*common, "--keep-finished", "1.5"]) == 0
    assert main(common) == 0
    assert [c.loop.keep_finished_s for c in seen] == [1.5 * DAY_S, None]


def test_logs_go_before_their_jobs_so_a_stop_in_between_leaves_no_folder_behind(tmp_path, journal, clock, monkeypatch):
    """The rows were deleted first: a scheduler stopped (or failing) before the folders went left
    them for good, nothing knowing their jobs any more. Now a stop in between leaves the jobs, which
    the next prune deletes."""
    state = tmp_path / "state"
    a = submit(journal, "a")
    submit(journal, "b")  # the highest number, kept
    write_log(state, a)
    finish(journal, clock, a)
    clock.t += DAY_S

    def stopped(ids):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(journal, "delete_ended", stopped)
    with pytest.raises(sqlite3.OperationalError):
        Retention(keep_s=10.0).prune(journal)
    assert not rank_log_path(state, a, 0).parent.exists() and journal.get(a).state is JobState.FINISHED
    monkeypatch.undo()
    assert Retention(keep_s=10.0).prune(journal) == [a]


def test_delete_ended_leaves_a_job_that_is_not_ended(journal, clock):
    queued, done = submit(journal, "q"), submit(journal, "d")
    finish(journal, clock, done)
    submit(journal, "z")
    assert journal.delete_ended([queued, done, "nobody-9"]) == [done]
    assert journal.get(queued).state is JobState.QUEUED


def test_a_job_is_read_into_the_history_before_it_is_pruned(tmp_path):
    """A tick with no node up returns before it builds its view, where the live history reads the
    newly finished jobs: a cluster down for longer than --keep-finished lost them from the
    forecasts. The prune reads them first."""
    from test_control_loop import Rig

    from deepshare.policies import make_policy

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), keep_finished_s=DAY_S)
    a = rig.submit("a", 1)
    finish(rig.journal, rig.clock, a, after=100.0)  # ended while no tick built a view
    rig.submit("b", 1)
    rig.clock.t += 2 * DAY_S
    rig.fake.nodes.clear()
    assert rig.loop.tick().error == "no alive GPU nodes"
    with pytest.raises(KeyError):
        rig.journal.get(a)
    assert [job.job_id for job in rig.loop.history] == [a]


def test_a_history_read_that_fails_does_not_stop_the_prune(tmp_path):
    """A finished row edited to hold bytes that are not UTF-8 cannot be read into the history;
    reading it first made every prune fail on it, so it was never pruned and every tick failed
    reading it for good (before, it failed until the prune deleted it)."""
    from test_control_loop import Rig

    from deepshare.policies import make_policy

    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), keep_finished_s=DAY_S)
    a = rig.submit("a", 1)
    finish(rig.journal, rig.clock, a, after=100.0)
    with rig.journal._tx() as db:
        db.execute("UPDATE jobs SET error = CAST(x'fffe41' AS TEXT) WHERE id = ?", (a,))
    rig.submit("b", 1)
    rig.clock.t += 2 * DAY_S
    assert rig.loop.tick().error is None
    assert a not in {job.job_id for job in rig.journal.jobs()}
    assert rig.journal.jobs(JobState.QUEUED) == []  # b launched: the tick read its history
