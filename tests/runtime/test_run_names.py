"""Each journal's runs carry its instance id in their Ray names (``deepshare.runtime.runnames``).

Every journal numbers its jobs from ``<name>-1``: with names made of the job and attempt alone,
a second scheduler on the same Ray cluster collided with the first one's runs and removed them.
These tests need no Ray: what a journal stores and what names its runs get; the collision itself
on a real local Ray is in ``test_run_names_ray.py``."""

from __future__ import annotations

import sqlite3

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.runtime.journal import JOURNAL_FILE, JobState, Journal
from deepshare.runtime.loop import ControlLoop
from deepshare.runtime.runnames import RunNames
from deepshare.runtime.spec import spec_from_json

SPEC = spec_from_json(dict(name="t", gpus=1, model="DLRM", command=["/bin/true"], checkpoint_dir="/c"))


def test_two_journals_name_their_first_job_s_run_apart_and_a_reopened_one_keeps_its_names(tmp_path):
    a, b = Journal(tmp_path / "a"), Journal(tmp_path / "b")
    assert a.submit(SPEC).job_id == b.submit(SPEC).job_id == "t-1"
    assert a.run_names.pg("t-1", 1) != b.run_names.pg("t-1", 1)
    assert a.run_names.pg("t-1", 1) == f"ds-{a.run_names.instance}-t-1-a1"
    assert a.run_names.actor("t-1", 1, 3) == f"ds-{a.run_names.instance}-t-1-a1-r3"
    names = a.run_names
    a.close()
    again = Journal(tmp_path / "a")  # a restarted scheduler finds its own runs again
    assert again.run_names == names
    again.close()
    b.close()


def test_the_control_loop_names_its_runs_after_its_journal(tmp_path):
    journal = Journal(tmp_path / "s")
    loop = ControlLoop(journal, None, None, None, None)  # type: ignore[arg-type]
    assert loop.launcher.names == journal.run_names  # type: ignore[attr-defined]
    journal.close()


def _as_an_older_version_wrote_it(state) -> None:  # type: ignore[no-untyped-def]
    db = sqlite3.connect(state / JOURNAL_FILE)
    db.execute("DELETE FROM meta WHERE key IN ('instance', 'legacy_runs', 'checkpoint_names_from')")
    db.commit()
    db.close()


def test_an_older_journal_gets_an_id_once_and_its_open_runs_keep_their_old_names(tmp_path):
    state = tmp_path / "s"
    journal = Journal(state)
    running = journal.submit(SPEC).job_id
    journal.start_run(running, (("n0", 1),), None)
    done = journal.submit(SPEC).job_id
    journal.start_run(done, (("n0", 1),), None)
    journal.end_run(done, 1, JobState.FINISHED, "finished")
    journal.close()
    _as_an_older_version_wrote_it(state)

    upgraded = Journal(state)
    names = upgraded.run_names
    assert names.legacy == {(running, 1)}
    assert names.pg(running, 1) == f"ds-{running}-a1"  # as the older version launched it
    assert names.actor(running, 1, 0) == f"ds-{running}-a1-r0"
    assert names.pg(running, 2) == f"ds-{names.instance}-{running}-a2"  # its next run: the new names
    assert names.pg(done, 1) == f"ds-{names.instance}-{done}-a1"
    upgraded.close()
    assert Journal(state).run_names == names  # written once: the next open reads the same


def _journal_with_meta(tmp_path, key: str, value: str):  # type: ignore[no-untyped-def]
    """A new journal's state folder whose ``meta`` row ``key`` was then edited to ``value``."""
    state = tmp_path / "s"
    Journal(state).close()
    db = sqlite3.connect(state / JOURNAL_FILE)
    db.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    db.commit()
    db.close()
    return state


def test_a_journal_whose_instance_id_was_edited_is_one_line(tmp_path):
    state = _journal_with_meta(tmp_path, "instance", "x/../y")
    with pytest.raises(DeepShareError, match=r"meta.instance: expected 8 to 32 lowercase hex digits, got 'x/../y'"):
        Journal(state)


def test_legacy_names_only_for_the_listed_runs():
    names = RunNames("00112233aabb", frozenset({("j-3", 2)}))
    assert names.pg("j-3", 2) == "ds-j-3-a2" and names.pg("j-3", 3) == "ds-00112233aabb-j-3-a3"


# -- checkpoint folders ------------------------------------------------------------------------
CKPT = spec_from_json(dict(name="t", gpus=1, model="DLRM", command=["/bin/true"], checkpoint_dir="/shared/ckpt"))


def test_two_journals_first_jobs_keep_their_checkpoints_apart(tmp_path):
    """Both journals' first job is t-1: with <checkpoint_dir>/<job id> the second one resumed
    from the first one's checkpoint (two schedulers on shared storage, or a reset journal)."""
    a, b = Journal(tmp_path / "a"), Journal(tmp_path / "b")
    ja, jb = a.submit(CKPT), b.submit(CKPT)
    assert ja.job_id == jb.job_id == "t-1"
    pa, pb = a.run_names.checkpoint_dir(ja.spec, ja.job_id), b.run_names.checkpoint_dir(jb.spec, jb.job_id)
    assert pa != pb and pa == f"/shared/ckpt/{a.run_names.instance}-t-1"
    a.close()
    (tmp_path / "a" / JOURNAL_FILE).unlink()  # a reset journal: a new instance, so a new folder
    for suffix in ("-wal", "-shm"):
        (tmp_path / "a" / (JOURNAL_FILE + suffix)).unlink(missing_ok=True)
    reset = Journal(tmp_path / "a")
    again = reset.submit(CKPT)
    assert again.job_id == "t-1" and reset.run_names.checkpoint_dir(again.spec, again.job_id) not in (pa, pb)
    reset.close()
    b.close()


def test_jobs_journalled_before_the_instance_folders_keep_their_old_checkpoint_folder(tmp_path):
    state = tmp_path / "s"
    journal = Journal(state)
    preempted = journal.submit(CKPT).job_id  # t-1, requeued after a preemption: it resumes from its folder
    running = journal.submit(CKPT).job_id
    journal.start_run(running, (("n0", 1),), None)
    journal.close()
    db = sqlite3.connect(state / JOURNAL_FILE)  # as the version before checkpoint folders named the instance
    db.execute("DELETE FROM meta WHERE key = 'checkpoint_names_from'")
    db.commit()
    db.close()
    upgraded = Journal(state)
    names = upgraded.run_names
    assert names.checkpoint_from == 3
    assert names.checkpoint_dir(CKPT, preempted) == "/shared/ckpt/t-1"
    assert names.checkpoint_dir(CKPT, running) == "/shared/ckpt/t-2"
    new = upgraded.submit(CKPT).job_id
    assert names.checkpoint_dir(CKPT, new) == f"/shared/ckpt/{names.instance}-t-3"
    upgraded.close()
    reopened = Journal(state)  # set once: a later start does not move the line
    assert reopened.run_names == names
    reopened.close()


def test_an_unreadable_checkpoint_line_is_refused_in_one_line(tmp_path):
    state = _journal_with_meta(tmp_path, "checkpoint_names_from", "soon")
    with pytest.raises(DeepShareError, match=r"meta.checkpoint_names_from: expected a whole number, got 'soon'"):
        Journal(state)
