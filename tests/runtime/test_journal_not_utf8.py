"""A journal row edited to hold bytes that are not UTF-8 is quarantined, and everything else goes on.

Python's ``sqlite3`` raised ``OperationalError: Could not decode to UTF-8`` for the whole read, so
one such row (a hand edit, a tool writing Latin-1) failed every tick of a running scheduler and
every API read that met it. The journal reads such a value as its text with the bad bytes escaped
(:class:`~deepshare.runtime.journal.NotUtf8`): a job row with one in its id, spec, state or
placement is quarantined naming the column; one in a column only shown (an error) is shown.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_control_loop import Rig  # noqa: E402

from deepshare.policies import make_policy  # noqa: E402
from deepshare.runtime.journal import JobState, Journal, NotUtf8, text_or_escaped  # noqa: E402


def edit(state: Path, sql: str, *params: object) -> None:
    """Change the journal from another connection, as a hand edit does."""
    db = sqlite3.connect(state / "journal.sqlite")
    db.execute(sql, params)
    db.commit()
    db.close()


@pytest.fixture
def rig(tmp_path):
    return Rig(tmp_path / "state", make_policy("fifo+consolidated"), nodes={"node0": 2})


def test_text_or_escaped():
    assert text_or_escaped("é".encode()) == "é" and type(text_or_escaped(b"a")) is str
    bad = text_or_escaped(b"ab\xffc")
    assert isinstance(bad, NotUtf8) and bad == "ab\\xffc" and bad.raw == b"ab\xffc"
    assert bad.problem == "byte 0xff at offset 2 is not UTF-8"


def test_a_queued_spec_not_utf8_is_quarantined_and_the_tick_goes_on(rig):
    bad, good = rig.submit("bad", 1), rig.submit("good", 1)
    edit(rig.state_dir, "UPDATE jobs SET spec = CAST(X'7B22ff227D' AS TEXT) WHERE id = ?", bad)
    report = rig.loop.tick()
    assert report.error is None and report.launched == (good,)
    record = rig.journal.get(bad)
    assert record.state is JobState.FAILED
    assert record.error == "quarantined: its journal row cannot be read (spec: byte 0xff at offset 2 is not UTF-8)"
    assert rig.loop.tick().error is None  # and every later tick


def test_a_running_placement_not_utf8_is_quarantined_and_its_run_removed(rig):
    bad = rig.submit("bad", 2)
    assert rig.loop.tick().launched == (bad,)
    edit(rig.state_dir, "UPDATE jobs SET placement = CAST(X'5B5Bff5D5D' AS TEXT) WHERE id = ?", bad)
    good = rig.submit("good", 2)
    assert rig.loop.tick().error is None  # quarantined by this tick's read
    assert rig.journal.get(bad).error.endswith("(placement: byte 0xff at offset 2 is not UTF-8)")
    report = rig.loop.tick()  # its run is removed by the next, and good launched onto its GPUs
    assert report.error is None and rig.fake.teardowns == [(bad, 1)] and report.launched == (good,)


def test_an_id_not_utf8_is_given_its_escaped_id_and_can_be_found_and_pruned(tmp_path):
    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), nodes={"node0": 2}, keep_finished_s=10.0)
    bad = rig.submit("bad", 2)
    assert rig.loop.tick().launched == (bad,)
    raw = b"bad\xff-1"
    for table, column in (("jobs", "id"), ("runs", "job_id"), ("transitions", "job_id")):
        edit(rig.state_dir, f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {column} = ?", raw, bad)
    report = rig.loop.tick()
    assert report.error is None
    shown = "bad\\xff-1"
    record = rig.journal.get(shown)
    assert record.state is JobState.FAILED and record.error.endswith("(id: byte 0xff at offset 3 is not UTF-8)")
    assert [t.to_state for t in rig.journal.transitions(shown)][-1] is JobState.FAILED  # its history went with it
    assert len(rig.journal.runs(shown)) == 1
    rig.loop.tick()  # the run of the quarantined row is removed (under the name it can have: none)
    assert rig.journal.orphans() == []
    rig.submit("next", 1)  # the highest number is kept; the quarantined job is not the highest now
    rig.clock.t += 100.0
    rig.loop.retention.next_at = 0.0 if hasattr(rig.loop.retention, "next_at") else None
    for _ in range(3):
        rig.clock.t += 100.0
        assert rig.loop.tick().error is None
    with pytest.raises(KeyError):
        rig.journal.get(shown)


def test_an_escaped_id_another_job_has_gets_a_suffix(rig):
    a = rig.submit("a", 1)
    rig.submit("b", 1)
    edit(rig.state_dir, "UPDATE jobs SET id = ? WHERE id = ?", "x\\xff", a)  # an id that is its escaped text
    edit(rig.state_dir, "UPDATE jobs SET id = CAST(? AS TEXT) WHERE id = ?", b"x\xff", "b-2")
    ids = {job.job_id for job in rig.journal.jobs()}
    assert ids == {"x\\xff", "x\\xff~1"}
    assert rig.journal.get("x\\xff~1").state is JobState.FAILED
    assert rig.journal.get("x\\xff").state is JobState.QUEUED


def test_an_error_not_utf8_is_shown_escaped_not_quarantined(rig):
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.finish(a)
    rig.loop.tick()
    edit(rig.state_dir, "UPDATE jobs SET error = CAST(X'6F6Bff' AS TEXT) WHERE id = ?", a)
    record = rig.journal.get(a)
    assert record.state is JobState.FINISHED and record.error == "ok\\xff"


def test_the_api_lists_jobs_with_such_rows(tmp_path):
    from test_runtime_api import call, serving

    from deepshare.runtime.spec import spec_from_json

    journal = Journal(tmp_path / "state")
    spec = dict(name="a", gpus=1, model="DLRM", command=["true"], checkpoint_dir="/tmp/c")
    ok, bad = journal.submit(spec_from_json(spec)).job_id, journal.submit(spec_from_json(spec)).job_id
    edit(tmp_path / "state", "UPDATE jobs SET spec = CAST(X'7B22ff227D' AS TEXT) WHERE id = ?", bad)
    edit(tmp_path / "state", "UPDATE transitions SET reason = CAST(X'6F6Bff' AS TEXT) WHERE job_id = ?", ok)
    with serving(journal, cluster_gpus=lambda: (8, 1)) as url:
        status, listed = call(url, "GET", "/v1/jobs")
        assert status == 200, listed
        assert {job["id"]: job["state"] for job in listed} == {ok: "queued", bad: "failed"}  # type: ignore[union-attr]
        status, shown = call(url, "GET", f"/v1/jobs/{ok}")
        assert status == 200 and shown["transitions"][0]["reason"] == "ok\\xff", shown  # type: ignore[index]
    journal.close()


# -- second read ---------------------------------------------------------------------------
def test_two_readers_of_a_row_whose_id_is_not_utf8_give_the_one_id(rig):
    """The API and the loop read the row before either quarantined it: the second rekeyed it
    again, to a suffixed id no row has, and answered a job that cannot be found."""
    bad = rig.submit("bad", 1)
    edit(rig.state_dir, "UPDATE jobs SET id = CAST(? AS TEXT) WHERE id = ?", b"bad\xff-1", bad)
    journal = rig.journal
    row = journal._db.execute(f"SELECT {journal._COLS} FROM jobs").fetchone()
    first, second = journal._record(row), journal._record(row)
    assert first.job_id == second.job_id == "bad\\xff-1"
    assert [r[0] for r in journal._db.execute("SELECT id FROM jobs")] == ["bad\\xff-1"]
    assert len([t for t in journal.transitions("bad\\xff-1") if t.to_state is JobState.FAILED]) == 1


def test_an_ended_job_whose_id_is_not_utf8_is_pruned(tmp_path):
    """Read only by the prune (no tick parses an ended row), its escaped id matched no row: it was
    never deleted, and every prune logged that its logs folder could not be removed."""
    rig = Rig(tmp_path / "state", make_policy("fifo+consolidated"), nodes={"node0": 2}, keep_finished_s=10.0)
    a = rig.submit("a", 1)
    rig.loop.tick()
    rig.fake.finish(a)
    rig.loop.tick()
    rig.submit("b", 1)  # the highest number is kept
    for table, column in (("jobs", "id"), ("runs", "job_id"), ("transitions", "job_id")):
        edit(rig.state_dir, f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {column} = ?", b"a\xff-1", a)
    for _ in range(4):
        rig.clock.t += 1000.0
        assert rig.loop.tick().error is None
    assert [job.job_id for job in rig.journal.jobs()] == ["b-2"]
