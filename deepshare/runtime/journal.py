"""The scheduler's durable journal: jobs, their states, every transition and every run (SQLite, WAL).

The journal is the scheduler's only memory. A job moves through a small state machine
(:data:`ALLOWED`); every move is a compare-and-set on the current state inside one transaction
that also appends to ``transitions``, so a crash leaves either the old or the new state, never
half of a move. A launch is journalled (state RUNNING, attempt + 1, placement) *before* the
placement group is created; recovery therefore knows every run that might exist on the cluster
and either re-attaches to it or removes it and requeues the job, so a job never runs twice at
once and is never lost.

The file is private (mode 0600; SQLite gives its ``-wal`` and ``-shm`` files the same mode) and
is created whole (schema written under a temporary name, then renamed), so an existing
``journal.sqlite`` that is empty, not SQLite or lacks the journal's tables is refused with one
line instead of being silently replaced by a new empty journal; so is a missing one whose
``-wal`` or ``-shm`` file is still there (SQLite would replay that WAL onto the new journal). A job row that cannot be read
(a spec that is not valid, an unknown state) is quarantined: the job is reported ``failed`` with
the reason and the rest of the journal works.

Its ``meta`` table also holds the journal's random instance id, which every run's Ray names and
checkpoint folder carry so that two journals' runs never share a name or a checkpoint
(:mod:`deepshare.runtime.runnames`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Collection, Iterator, Sequence

from deepshare.core.bounds import MAX_STEP, MAX_THROUGHPUT
from deepshare.core.errors import DeepShareError
from deepshare.core.files import resolved
from deepshare.runtime.private import make_private_dirs
from deepshare.runtime.runnames import CHECKPOINT_KEY, INSTANCE_KEY, RunNames, journal_run_names, new_instance
from deepshare.runtime.spec import LiveJobSpec

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.sqlite"
TABLES = frozenset({"meta", "jobs", "transitions", "runs"})
LAUNCH_FAILED = "launch failed"
"""Reason prefix of a run whose launch failed (counted towards ``--max-launch-attempts``)."""
MOVE_AWAY = "move it away with its -wal and -shm files to start with a new journal"
"""What a refusal of the journal file advises: its ``-wal`` and ``-shm`` files are part of it (a
WAL left behind is replayed onto the next journal made in the folder)."""
QUARANTINED = "quarantined"
"""Error prefix of a job whose journal row could not be read."""


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})
ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.QUEUED, JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}),
    JobState.FINISHED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

NodeAlloc = tuple[tuple[str, int], ...]
"""A placement by node *name* (indices change when nodes join or leave): ``(("node0", 2), ...)``."""


class TransitionError(DeepShareError):
    """A move the state machine forbids, or the job is not in the state the caller expected."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: str
    seq: int
    spec: LiveJobSpec
    state: JobState
    submit_time: float
    attempt: int
    """Launches so far; the current (or last) run is number ``attempt``."""
    preemptions: int
    placement: NodeAlloc | None
    run_started: float | None
    queued_since: float
    last_run_s: float
    attained_gpu_s: float
    samples: float | None
    step: int | None
    throughput: float | None
    predicted_throughput: float | None
    cancel_requested: bool
    error: str | None
    finish_time: float | None


@dataclass(frozen=True, slots=True)
class Transition:
    seq: int
    job_id: str
    from_state: JobState | None
    to_state: JobState
    at: float
    reason: str
    attempt: int
    placement: NodeAlloc | None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One launch of a job: where, when, and the measured vs the simulator-predicted throughput."""

    job_id: str
    attempt: int
    placement: NodeAlloc
    started: float
    ended: float | None
    end_reason: str | None
    measured_throughput: float | None
    predicted_throughput: float | None
    start_step: int | None
    """The first step the scheduler saw this run report (it polls, so at or a little after the step
    the run started from; a resumed run starts from its checkpoint's step, not 0)."""


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, spec TEXT NOT NULL, state TEXT NOT NULL,
    submit_time REAL NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0,
    placement TEXT, run_started REAL, queued_since REAL NOT NULL, last_run_s REAL NOT NULL DEFAULT 0,
    attained_gpu_s REAL NOT NULL DEFAULT 0, samples REAL, step INTEGER, throughput REAL,
    predicted_throughput REAL, cancel_requested INTEGER NOT NULL DEFAULT 0, error TEXT, finish_time REAL,
    queue TEXT
);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
    at REAL NOT NULL, reason TEXT NOT NULL, attempt INTEGER NOT NULL, placement TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, placement TEXT NOT NULL, started REAL NOT NULL,
    ended REAL, end_reason TEXT, measured_throughput REAL, predicted_throughput REAL, start_step INTEGER,
    PRIMARY KEY (job_id, attempt)
);
"""
TERMS_PER_QUERY = 400
"""(queue, state) pairs one query of :meth:`Journal.queue_page` reads (SQLite's compound SELECT
takes 500 terms)."""
PRUNE_BATCH = 1000
"""Jobs one :meth:`Journal.prune` deletes at most (one transaction: a short hold of the journal)."""
INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_queue ON jobs (queue, seq);
CREATE INDEX IF NOT EXISTS jobs_by_queue_state ON jobs (queue, state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_state_finish ON jobs (state, finish_time, seq);
CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started, job_id, attempt);
CREATE INDEX IF NOT EXISTS transitions_by_job ON transitions (job_id, seq);
CREATE INDEX IF NOT EXISTS runs_open ON runs (started) WHERE ended IS NULL;
"""
"""Created with the tables, and on opening a journal an older version made without them. Every
read a tick or a refit makes goes through one: the live history's read of the jobs finished since
the last tick walked every finished job without ``jobs_by_state_finish`` (80 ms a tick with
300,000 of them), the contention learner's read of the newest runs sorted every run without
``runs_by_start`` (730 ms, under the journal's lock), a job's transitions (``deepshare jobs
ID``, :meth:`Journal.prune`) were a scan of every job's without ``transitions_by_job``, and the
tick's read of the quarantined jobs' open runs (:meth:`Journal.orphans`) walked every failed job
without ``runs_open`` (only the runs not ended are in it)."""
INDEX_NAMES = frozenset(re.findall(r"CREATE INDEX IF NOT EXISTS (\w+)", INDEXES))
SCHEMA += INDEXES


def _alloc_json(alloc: NodeAlloc | None) -> str | None:
    return None if alloc is None else json.dumps([[n, g] for n, g in alloc])


MAX_NODE_GPUS = 4096
"""The most GPUs one node of a stored placement may hold (a job's own limit)."""


def _alloc(text: str | None) -> NodeAlloc | None:
    """A stored placement; a row edited to hold anything else is a ValueError or TypeError, which
    every reader treats as an unreadable row (a list nested thousands deep was a RecursionError,
    an infinite GPU count an OverflowError that no reader caught)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"placement is {type(text).__name__}, not JSON text")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError("placement: JSON nested too deeply") from None
    if not isinstance(doc, list):
        raise ValueError("placement: not a list of [node, GPUs] pairs")
    alloc = []
    for pair in doc:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and type(pair[1]) is int
                and 0 < pair[1] <= MAX_NODE_GPUS):
            raise ValueError(f"placement: {str(pair)[:60]} is not a [node name, GPUs from 1 to {MAX_NODE_GPUS}] pair")
        alloc.append((pair[0], pair[1]))
    return tuple(alloc)


class Journal:
    """SQLite journal at ``<state dir>/journal.sqlite``; thread-safe (one connection, one lock)."""

    def __init__(self, state_dir: str | Path, clock: Any = time.time) -> None:
        self.dir = Path(state_dir)
        self._clock = clock
        path = self.dir / JOURNAL_FILE
        try:
            make_private_dirs(self.dir)
            if not path.exists():
                _refuse_stale_sidecars(path, state_dir)
                self._create(path)
            elif path.stat().st_size == 0:
                raise DeepShareError(f"--state {state_dir}: {path} is empty (0 bytes), not a journal; {MOVE_AWAY}")
            else:
                _check_is_journal(path, state_dir)  # read-only: a refused file is left as it was
            os.chmod(path, 0o600)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.text_factory = text_or_escaped
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            epoch = self._db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone() if "meta" in tables else None
        except sqlite3.DatabaseError as exc:
            raise DeepShareError(f"--state {state_dir}: {path} is not a journal ({exc}); {MOVE_AWAY}") from None
        except (OSError, sqlite3.Error) as exc:
            raise DeepShareError(f"--state {state_dir}: cannot open the journal ({exc})") from None
        if not TABLES <= tables or epoch is None:
            self._db.close()
            missing = ", ".join(sorted(TABLES - tables)) or "meta.epoch"
            raise DeepShareError(f"--state {state_dir}: {path} is not a journal (missing {missing}); {MOVE_AWAY}")
        try:
            self.epoch = float(epoch[0])
        except (TypeError, ValueError):
            self._db.close()
            raise DeepShareError(f"--state {state_dir}: {path}: meta.epoch is not a number ({epoch[0]!r})") from None
        self._lock = threading.RLock()
        try:
            self._upgrade()
            with self._tx() as db:
                self.run_names: RunNames = journal_run_names(db, f"--state {state_dir}: {path}")
                """How this journal's runs are named on Ray (its instance id, assigned here once to a
                journal an older version wrote: :mod:`deepshare.runtime.runnames`)."""
        except sqlite3.Error as exc:  # e.g. another process holds the journal for longer than the wait
            self._db.close()
            raise DeepShareError(f"--state {state_dir}: cannot bring {path} up to this version's schema ({exc}); "
                                 "try again when no other process is writing it") from None
        except DeepShareError:
            self._db.close()
            raise

    @classmethod
    def read_only(cls, state_dir: str | Path, flag: str = "--state") -> "Journal":
        """The journal in ``state_dir`` opened for reading only (``deepshare calibrate
        --from-state``, which a running scheduler's journal must allow): checked as a start
        checks it, and changed in nothing (no chmod, no switch to WAL mode, no schema upgrade,
        no lock taken); a write through it fails. Errors name ``flag``."""
        path = Path(state_dir) / JOURNAL_FILE
        _refuse_unmade_sidecars(path, state_dir, flag)
        _check_is_journal(path, state_dir, flag, "give a scheduler's state folder")
        journal = cls.__new__(cls)
        journal.dir, journal._clock, journal._lock = Path(state_dir), time.time, threading.RLock()
        try:
            journal._db = sqlite3.connect(f"{resolved(path).as_uri()}?mode=ro", uri=True, check_same_thread=False,
                                          isolation_level=None)
            journal._db.text_factory = text_or_escaped
            journal.epoch = float(journal._db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()[0])
        except (sqlite3.Error, TypeError, ValueError) as exc:
            raise DeepShareError(f"{flag} {state_dir}: cannot read the journal ({exc})") from None
        return journal

    def _create(self, path: Path) -> None:
        """A new journal, schema, epoch and instance id written under a temporary name, then renamed into place."""
        tmp = path.with_name(path.name + ".new")
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.executescript(SCHEMA)
            db.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(float(self._clock())),))
            db.execute("INSERT INTO meta VALUES (?, ?)", (INSTANCE_KEY, new_instance()))
            db.execute("INSERT INTO meta VALUES (?, ?)", (CHECKPOINT_KEY, "1"))  # every job's folder names the instance
        finally:
            db.close()
        os.replace(tmp, path)

    def _upgrade(self) -> None:
        """Bring a journal an older version wrote up to this schema, in one transaction: the
        ``queue`` column (a job's queue as its spec fixed it, filled from the specs; NULL: decided
        by the tenants file's rule) and the indexes. The schema is read again inside the
        transaction: another process may have upgraded the journal since."""
        if _has_queue(self._db) and _has_indexes(self._db):
            return
        with self._tx() as db:
            if not _has_queue(db):
                db.execute("ALTER TABLE jobs ADD COLUMN queue TEXT")
                db.executemany("UPDATE jobs SET queue = ? WHERE id = ?", _spec_queues(db))
            for statement in filter(str.strip, INDEXES.split(";")):
                db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def now(self) -> float:
        return float(self._clock())

    class _Tx:
        """One write transaction under the journal's lock. The lock is released whatever happens:
        a BEGIN that fails (another process holds the journal past the busy timeout) releases it
        at once, and a COMMIT that fails is rolled back first, so the connection is never left
        inside a transaction. A lock left held stopped the control loop and every API thread for
        good, and a transaction left open made every later BEGIN fail."""

        def __init__(self, journal: "Journal") -> None:
            self.j = journal

        def __enter__(self) -> sqlite3.Connection:
            self.j._lock.acquire()
            try:
                self.j._db.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.j._lock.release()
                raise
            return self.j._db

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            db = self.j._db
            try:
                if exc_type is None:
                    try:
                        db.execute("COMMIT")
                    except BaseException:
                        _rollback(db)
                        raise
                else:
                    _rollback(db)
            finally:
                self.j._lock.release()

    def _tx(self) -> "Journal._Tx":
        return Journal._Tx(self)

    # -- writes --------------------------------------------------------------------------------
    def submit(self, spec: LiveJobSpec) -> JobRecord:
        """Add a queued job; its id is ``<name>-<seq>``."""
        from deepshare.runtime.spec import spec_json

        now = self.now()
        with self._tx() as db:
            # Integers only (SQLite sorts text and blobs above them: an edited row's text seq made
            # the next one 1, then every later one a duplicate); the index is read from its top.
            top = db.execute("SELECT seq FROM jobs WHERE typeof(seq) = 'integer' ORDER BY seq DESC LIMIT 1").fetchone()
            seq = 1 if top is None else top[0] + 1
            if seq > MAX_SEQ:
                raise DeepShareError(f"the journal's job numbers are used up (the last is {top[0]})")
            job_id = f"{spec.name}-{seq}"
            db.execute(
                "INSERT INTO jobs (id, seq, spec, state, submit_time, queued_since, queue) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, seq, spec_json(spec), JobState.QUEUED.value, now, now, spec.queue),
            )
            self._log(db, job_id, None, JobState.QUEUED, now, "submitted", 0, None)
        return self.get(job_id)

    def _log(self, db: sqlite3.Connection, job_id: str, old: JobState | None, new: JobState, at: float,
             reason: str, attempt: int, alloc: NodeAlloc | None) -> None:
        db.execute(
            "INSERT INTO transitions (job_id, from_state, to_state, at, reason, attempt, placement) VALUES (?,?,?,?,?,?,?)",
            (job_id, None if old is None else old.value, new.value, at, reason, attempt, _alloc_json(alloc)),
        )

    def _current(self, db: sqlite3.Connection, job_id: str) -> sqlite3.Row | tuple:
        row = db.execute("SELECT state, attempt, run_started, placement, cancel_requested FROM jobs WHERE id=?",
                         (job_id,)).fetchone()
        if row is None:
            raise TransitionError(f"unknown job {job_id!r}")
        return row

    def _move(self, db: sqlite3.Connection, job_id: str, expected: JobState, new: JobState) -> tuple:
        row = self._current(db, job_id)
        state = JobState(row[0])
        if state is not expected:
            raise TransitionError(f"job {job_id!r} is {state.value}, expected {expected.value}")
        if new not in ALLOWED[state]:
            raise TransitionError(f"job {job_id!r}: {state.value} -> {new.value} is not allowed")
        return row

    def start_run(self, job_id: str, alloc: NodeAlloc, predicted_throughput: float | None) -> int:
        """QUEUED -> RUNNING at ``alloc``; returns the new attempt number (journalled before launch)."""
        now = self.now()
        with self._tx() as db:
            row = self._move(db, job_id, JobState.QUEUED, JobState.RUNNING)
            if row[4]:
                raise TransitionError(f"job {job_id!r} is being cancelled")
            attempt = int(row[1]) + 1
            db.execute(
                "UPDATE jobs SET state=?, attempt=?, placement=?, run_started=?, predicted_throughput=?, throughput=NULL,"
                " error=NULL WHERE id=?",
                (JobState.RUNNING.value, attempt, _alloc_json(alloc), now, predicted_throughput, job_id),
            )
            db.execute(
                "INSERT INTO runs (job_id, attempt, placement, started, predicted_throughput) VALUES (?,?,?,?,?)",
                (job_id, attempt, _alloc_json(alloc), now, predicted_throughput),
            )
            self._log(db, job_id, JobState.QUEUED, JobState.RUNNING, now, "launched", attempt, alloc)
        return attempt

    def end_run(self, job_id: str, attempt: int, new: JobState, reason: str, *, preempted: bool = False,
                error: str | None = None) -> None:
        """RUNNING -> ``new`` for run ``attempt`` (a stale attempt is refused); accounts the run's GPU time.

        A job whose cancel was asked is CANCELLED rather than requeued: a cancel that arrives while
        a launch is failing, or while the job is being preempted, is never lost.
        """
        now = self.now()
        with self._tx() as db:
            row = self._move(db, job_id, JobState.RUNNING, new)
            if int(row[1]) != attempt:
                raise TransitionError(f"job {job_id!r} is on run {row[1]}, not {attempt}")
            if new is JobState.QUEUED and row[4]:
                new, reason, preempted = JobState.CANCELLED, f"{reason}; cancelled", False
            started = float(row[2]) if row[2] is not None else now
            alloc = _alloc(row[3]) or ()
            ran = max(0.0, now - started)
            gpus = sum(g for _, g in alloc)
            terminal = new in TERMINAL
            db.execute(
                "UPDATE jobs SET state=?, placement=NULL, run_started=NULL, last_run_s=?, attained_gpu_s=attained_gpu_s+?,"
                " preemptions=preemptions+?, queued_since=?, error=COALESCE(?, error), finish_time=? WHERE id=?",
                (new.value, ran, ran * gpus, 1 if preempted else 0, now, error, now if terminal else None, job_id),
            )
            db.execute("UPDATE runs SET ended=?, end_reason=? WHERE job_id=? AND attempt=?", (now, reason, job_id, attempt))
            self._log(db, job_id, JobState.RUNNING, new, now, reason, attempt, alloc)

    def cancel_queued(self, job_id: str) -> None:
        now = self.now()
        with self._tx() as db:
            row = self._move(db, job_id, JobState.QUEUED, JobState.CANCELLED)
            db.execute("UPDATE jobs SET state=?, finish_time=?, cancel_requested=1 WHERE id=?",
                       (JobState.CANCELLED.value, now, job_id))
            self._log(db, job_id, JobState.QUEUED, JobState.CANCELLED, now, "cancelled", int(row[1]), None)

    def fail_queued(self, job_id: str, reason: str) -> None:
        """QUEUED -> FAILED with ``reason`` as the error: a job the scheduler cannot handle (the
        control loop isolates it so that the other jobs go on)."""
        now = self.now()
        with self._tx() as db:
            row = self._move(db, job_id, JobState.QUEUED, JobState.FAILED)
            db.execute("UPDATE jobs SET state=?, error=?, finish_time=? WHERE id=?",
                       (JobState.FAILED.value, reason[-4000:], now, job_id))
            self._log(db, job_id, JobState.QUEUED, JobState.FAILED, now, reason[:300], int(row[1]), None)

    def request_cancel(self, job_id: str) -> None:
        """Mark a running job for cancellation; the control loop stops it."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET cancel_requested=1 WHERE id=?", (job_id,))

    def cancel(self, job_id: str) -> JobState:
        """Cancel in one transaction: a queued job is CANCELLED now; a running one is marked and the
        control loop stops it (or :meth:`end_run` cancels it if its run ends first). Returns the state
        after; raises KeyError for an unknown job, TransitionError for a job already over."""
        job = self.get(job_id)  # raises KeyError; quarantines an unreadable row first
        if job.state in TERMINAL:
            raise TransitionError(f"job {job_id!r} is already {job.state.value}")
        now = self.now()
        with self._tx() as db:
            row = self._current(db, job_id)
            state = JobState(row[0])
            if state is JobState.QUEUED:
                db.execute("UPDATE jobs SET state=?, finish_time=?, cancel_requested=1 WHERE id=?",
                           (JobState.CANCELLED.value, now, job_id))
                self._log(db, job_id, JobState.QUEUED, JobState.CANCELLED, now, "cancelled", int(row[1]), None)
                return JobState.CANCELLED
            if state is JobState.RUNNING:
                db.execute("UPDATE jobs SET cancel_requested=1 WHERE id=?", (job_id,))
                return JobState.RUNNING
            raise TransitionError(f"job {job_id!r} is already {state.value}")

    def orphans(self) -> list[tuple[str, int, int]]:
        """``(job id, attempt, ranks)`` of the runs of quarantined jobs still to be removed from the
        cluster. They are kept in the journal (a run whose ``end_reason`` says quarantined and has
        no ``ended``) until :meth:`orphan_removed`, so a scheduler that dies before removing one
        removes it after its restart. ``ranks``: the larger of what the run's placement and the
        job's spec still say (a teardown asks that many ranks to stop; asking more is harmless)."""
        with self._lock:
            rows = self._db.execute(
                # CROSS JOIN: the open runs first (runs_open), never a walk of every failed job
                "SELECT r.job_id, r.attempt, r.placement, j.spec FROM runs r CROSS JOIN jobs j ON j.id = r.job_id"
                " WHERE r.ended IS NULL AND j.state = ? AND r.end_reason LIKE ? ORDER BY r.started",
                (JobState.FAILED.value, QUARANTINED + "%")).fetchall()
        out = []
        for job_id, attempt, placement, spec in rows:
            try:
                held = sum(g for _, g in _alloc(placement) or ())
            except (TypeError, ValueError):
                held = 0
            ranks = max(held, _placeholder_spec(str(job_id), spec).gpus)
            out.append((str(job_id), _int(attempt), min(ranks, MAX_NODE_GPUS)))
        return out

    def orphan_removed(self, job_id: str, attempt: int) -> None:
        """Record that the run ``attempt`` of quarantined job ``job_id`` is gone from the cluster."""
        with self._tx() as db:
            db.execute("UPDATE runs SET ended=? WHERE job_id=? AND attempt=? AND ended IS NULL",
                       (self.now(), job_id, attempt))

    def prune(self, ended_before: float, limit: int = PRUNE_BATCH) -> list[str]:
        """Delete at most ``limit`` jobs that ended (finished, failed or cancelled) before
        ``ended_before`` (journal clock), with their transitions and runs, and return their ids
        (``--keep-finished``: a long-lived journal stays bounded): :meth:`prunable`, then
        :meth:`delete_ended` (a caller with files to remove per job removes them in between)."""
        return self.delete_ended(self.prunable(ended_before, limit))

    def prunable(self, ended_before: float, limit: int = PRUNE_BATCH) -> list[str]:
        """At most ``limit`` jobs that ended before ``ended_before``, the earliest ended first (by
        state), that :meth:`delete_ended` may delete.

        Two ended jobs are kept whatever their age: one whose run is still open (a quarantined
        job's run not yet removed from the cluster: :meth:`orphans`), and the one with the highest
        number, which the next job's number follows; deleting it would give its number, and with
        it its id, log folder and checkpoint folder, to the next submission. Neither can change for
        an ended job but by a newer submission, so what is read here stays deletable. A job whose
        id is not UTF-8 is quarantined instead (its id escaped; pruned when it is old enough)."""
        ids: list[str] = []
        if limit <= 0:
            return ids
        with self._lock:
            for state in sorted(s.value for s in TERMINAL):  # each a range of jobs_by_state_finish
                ids += [row[0] for row in self._db.execute(
                    "SELECT id FROM jobs WHERE state = ? AND finish_time < ?"
                    " AND seq < (SELECT seq FROM jobs WHERE typeof(seq) = 'integer' ORDER BY seq DESC LIMIT 1)"
                    " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id AND runs.ended IS NULL)"
                    " ORDER BY finish_time LIMIT ?", (state, ended_before, limit - len(ids)))]
                if len(ids) >= limit:
                    break
        for job_id in [job_id for job_id in ids if isinstance(job_id, NotUtf8)]:
            self._quarantine_id(job_id)  # its escaped id matched no row: it was never deleted
        return [str(job_id) for job_id in ids if not isinstance(job_id, NotUtf8)]

    def _quarantine_id(self, job_id: "NotUtf8") -> None:
        """Quarantine the job whose id is not UTF-8 (read by a query that does not parse its row:
        :meth:`prunable`), so that it has its escaped id and is pruned as any quarantined job."""
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM jobs WHERE id = CAST(? AS TEXT)",
                                   (job_id.raw,)).fetchone()
        if row is not None:
            self._record(row)

    def delete_ended(self, ids: Sequence[str]) -> list[str]:
        """Delete the jobs ``ids`` (from :meth:`prunable`) with their transitions and runs, in one
        transaction; return those deleted (a job that is not ended, or not there, is left)."""
        deleted: list[str] = []
        terminal = {s.value for s in TERMINAL}
        with self._tx() as db:
            for start in range(0, len(ids), TERMS_PER_QUERY):
                chunk = list(ids[start:start + TERMS_PER_QUERY])
                marks = ",".join("?" * len(chunk))
                ended = {str(row[0]) for row in db.execute(f"SELECT id, state FROM jobs WHERE id IN ({marks})", chunk)
                         if row[1] in terminal}  # by id: a state filter made SQLite walk every ended job
                found = [job_id for job_id in chunk if job_id in ended]  # in the order asked
                if found:
                    marks = ",".join("?" * len(found))
                    for table, column in (("runs", "job_id"), ("transitions", "job_id"), ("jobs", "id")):
                        db.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", found)
                deleted += found
        return deleted

    def meta(self, key: str) -> str | None:
        """The ``meta`` table's value for ``key`` (None: no such row; bytes edited in that are
        not UTF-8 come back escaped, as a :class:`NotUtf8`)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        """Write (None: delete) the ``meta`` row ``key``."""
        with self._tx() as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def open_runs(self) -> list[str]:
        """The job ids of the runs not ended, oldest run first: every run that may still be on the
        cluster (a running job's current run, a quarantined job's run still to be removed)."""
        with self._lock:
            rows = self._db.execute("SELECT job_id FROM runs WHERE ended IS NULL ORDER BY started").fetchall()
        return [str(job_id) for job_id, in rows]

    def launch_failures(self, job_id: str) -> tuple[int, float | None]:
        """Consecutive failed launches at the end of the job's ended runs (a run in progress is not
        counted), and when the last one ended."""
        with self._lock:
            rows = self._db.execute("SELECT end_reason, ended FROM runs WHERE job_id=? AND ended IS NOT NULL"
                                    " ORDER BY attempt DESC", (job_id,)).fetchall()
        count, last = 0, None
        for reason, ended in rows:
            if not isinstance(reason, str) or not reason.startswith(LAUNCH_FAILED):
                break
            count += 1
            last = ended if last is None else last
        return count, last

    def count(self, state: JobState) -> int:
        """How many jobs are in ``state`` (an index lookup, not a read of the journal)."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jobs WHERE state=?", (state.value,)).fetchone()[0])

    def count_in_queue(self, state: JobState, queue: str) -> int:
        """How many jobs whose spec fixed ``queue`` are in ``state`` (an index lookup)."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jobs WHERE queue=? AND state=?",
                                        (queue, state.value)).fetchone()[0])

    def counts(self) -> tuple[dict[str, int], int]:
        """Jobs by state and the GPUs held by running jobs (for metrics; never raises on a bad row)."""
        with self._lock:
            by_state = dict(self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
            placements = [r[0] for r in self._db.execute("SELECT placement FROM jobs WHERE state=?",
                                                          (JobState.RUNNING.value,))]
        gpus = 0
        for text in placements:
            try:
                gpus += sum(g for _, g in _alloc(text) or ())
            except (TypeError, ValueError):
                pass
        return {str(k): int(v) for k, v in by_state.items()}, gpus

    def record_progress(self, job_id: str, attempt: int, samples: float | None, step: int | None,
                        throughput: float | None, predicted: float | None) -> None:
        """The latest report of run ``attempt`` and the current prediction for its placement.

        The values must already be checked (:mod:`deepshare.runtime.reports`): anything but a finite
        number (an integer for ``step``) or None is refused here too, so that nothing a job wrote
        can reach the table that every API answer reads."""
        for name, value in (("samples", samples), ("throughput", throughput), ("predicted", predicted)):
            if value is not None and _finite(value) is None:
                raise DeepShareError(f"job {job_id}: {name} must be a finite number, got {value!r}"[:300])
        if step is not None and _step(step) is None:
            raise DeepShareError(f"job {job_id}: step must be an integer from 0 to 2**53, got {step!r}"[:300])
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET samples=COALESCE(?, samples), step=COALESCE(?, step), throughput=COALESCE(?, throughput),"
                " predicted_throughput=COALESCE(?, predicted_throughput) WHERE id=? AND attempt=? AND state=?",
                (samples, step, throughput, predicted, job_id, attempt, JobState.RUNNING.value),
            )
            db.execute(
                "UPDATE runs SET measured_throughput=COALESCE(?, measured_throughput),"
                " predicted_throughput=COALESCE(?, predicted_throughput), start_step=COALESCE(start_step, ?)"
                " WHERE job_id=? AND attempt=?",
                (throughput, predicted, step, job_id, attempt),
            )

    # -- reads ---------------------------------------------------------------------------------
    def _record(self, row: tuple) -> JobRecord:
        try:
            return self._parse(row)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError and JSON errors are ValueErrors
            return self._quarantine(row, exc)

    def _parse(self, row: tuple) -> JobRecord:
        (job_id, seq, spec, state, submit, attempt, preemptions, placement, run_started, queued_since, last_run_s,
         attained, samples, step, thp, pred, cancel, error, finish, _queue) = row  # the queue is the spec's
        for name, value in (("id", job_id), ("spec", spec), ("state", state), ("placement", placement)):
            if isinstance(value, NotUtf8):
                raise ValueError(f"{name}: {value.problem}")
        if not isinstance(spec, str):
            raise TypeError(f"spec is {type(spec).__name__}, not JSON text")
        parsed, state = LiveJobSpec.model_validate_json(spec), JobState(state)
        _whole("seq", seq, 1, MAX_SEQ)
        _whole("attempt", attempt, 0)
        _whole("preemptions", preemptions, 0)
        for name, value in (("submit_time", submit), ("queued_since", queued_since), ("last_run_s", last_run_s),
                            ("attained_gpu_s", attained), ("run_started", run_started), ("finish_time", finish)):
            if value is not None or name not in ("run_started", "finish_time"):
                _real(name, value, nonnegative=name in ("last_run_s", "attained_gpu_s"))
        alloc = _alloc(placement)
        if state is JobState.RUNNING:
            if attempt < 1:
                raise ValueError(f"attempt: {attempt} for a running job (its runs count from 1)")
            if not alloc or sum(g for _, g in alloc) != parsed.gpus:
                raise ValueError(f"placement: {placement!s:.60} does not hold the running job's {parsed.gpus} GPUs")
        return JobRecord(
            job_id=job_id, seq=seq, spec=parsed, state=state,
            submit_time=submit, attempt=attempt, preemptions=preemptions, placement=alloc,
            run_started=run_started, queued_since=queued_since, last_run_s=last_run_s, attained_gpu_s=attained,
            samples=_finite(samples), step=_step(step), throughput=_finite(thp), predicted_throughput=_finite(pred),
            cancel_requested=bool(cancel),
            error=error, finish_time=finish,
        )

    def _quarantine(self, row: tuple, exc: Exception) -> JobRecord:
        """Mark an unreadable job row FAILED (once, with a transition) and return a placeholder record.

        A row that said RUNNING may have a run on the cluster: its open run in ``runs`` gets the
        same reason and stays open until the control loop has removed it (:meth:`orphans`); any
        other open run is ended with that reason.
        """
        job_id, seq, raw_spec = row[0], row[1], row[2]
        what = str(exc).strip().splitlines()
        summary = " ".join(line.strip() for line in what[:3])[:300] or type(exc).__name__
        reason = f"{QUARANTINED}: its journal row cannot be read ({summary})"
        spec = _placeholder_spec(str(job_id), raw_spec, row[-1])
        now = self.now()
        with self._tx() as db:  # re-read inside the transaction: two readers quarantine a row once
            if isinstance(job_id, NotUtf8):
                job_id = _rekey(db, job_id, seq)
            current = db.execute("SELECT state, error, finish_time FROM jobs WHERE id=?", (job_id,)).fetchone()
            state, error, finish = current if current is not None else (JobState.FAILED.value, reason, now)
            if state != JobState.FAILED.value or not (isinstance(error, str) and error.startswith(QUARANTINED)):
                log.error("job %s: %s", job_id, reason)
                db.execute("UPDATE jobs SET state=?, error=?, placement=NULL, run_started=NULL, cancel_requested=0,"
                           " finish_time=? WHERE id=?", (JobState.FAILED.value, reason, now, job_id))
                running = state == JobState.RUNNING.value
                db.execute("UPDATE runs SET ended=?, end_reason=? WHERE job_id=? AND ended IS NULL",
                           (None if running else now, reason, job_id))
                old = state if state in {s.value for s in JobState} else None
                db.execute("INSERT INTO transitions (job_id, from_state, to_state, at, reason, attempt, placement)"
                           " VALUES (?,?,?,?,?,?,NULL)",
                           (job_id, old, JobState.FAILED.value, now, reason, _int(row[5])))
                error, finish = reason, now
        finish = _finite(finish)
        return JobRecord(  # what is still readable, finite (an answer with an infinity is no JSON)
            job_id=str(job_id), seq=_int(seq), spec=spec, state=JobState.FAILED,
            submit_time=_finite(row[4]) or 0.0, attempt=_int(row[5]), preemptions=_int(row[6]), placement=None,
            run_started=None, queued_since=_finite(row[9]) or 0.0, last_run_s=_finite(row[10]) or 0.0,
            attained_gpu_s=_finite(row[11]) or 0.0, samples=None, step=None, throughput=None, predicted_throughput=None,
            cancel_requested=False, error=error, finish_time=finish,
        )

    _COLS = ("id, seq, spec, state, submit_time, attempt, preemptions, placement, run_started, queued_since,"
             " last_run_s, attained_gpu_s, samples, step, throughput, predicted_throughput, cancel_requested, error,"
             " finish_time, queue")

    def get(self, job_id: str) -> JobRecord:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return self._record(row)

    def jobs(self, *states: JobState, last: int | None = None) -> list[JobRecord]:
        """Jobs in submission order, all or those in ``states``; with ``last``, only the ``last``
        most recently submitted of them (read as such: a long journal is not read whole)."""
        where = f" WHERE state IN ({','.join('?' * len(states))})" if states else ""
        params: list[object] = [s.value for s in states]
        with self._lock:
            if last is None:
                rows = self._db.execute(f"SELECT {self._COLS} FROM jobs{where} ORDER BY seq", params).fetchall()
            else:
                rows = self._db.execute(f"SELECT {self._COLS} FROM jobs{where} ORDER BY seq DESC LIMIT ?",
                                        [*params, last]).fetchall()[::-1]
        records = [self._record(r) for r in rows]
        return [r for r in records if not states or r.state in states]  # a quarantined row is FAILED now

    def queue_page(self, queues: Collection[str], states: Collection[JobState], before: int | None,
                   size: int) -> tuple[list[JobRecord], int | None]:
        """One page back of the jobs whose spec fixed one of ``queues``, or none (the tenants
        file's rule decides theirs: the caller filters them), in ``states`` (all when empty),
        submitted before the job of seq ``before`` (None: the newest): at most ``size`` rows, in
        submission order, and the seq of the oldest row read (None when there were fewer than
        ``size``: no older page). Each queue (and, with ``states``, each of its states) is read
        newest first through an index on its own, so a page costs its size, not the journal's."""
        every: list[str | None] = [*dict.fromkeys(queues), None]
        wanted: list[JobState | None] = [*dict.fromkeys(states)] or [None]
        terms = [(queue, state) for queue in every for state in wanted]
        rows: list[tuple] = []
        with self._lock:
            for start in range(0, len(terms), TERMS_PER_QUERY):  # SQLite takes 500 terms in a compound SELECT
                rows += self._newest(terms[start:start + TERMS_PER_QUERY], before, size)
        rows = sorted(rows, key=lambda row: row[1], reverse=True)[:size]  # by seq, newest first
        oldest = rows[-1][1] if len(rows) == size else None
        records = [self._record(r) for r in reversed(rows)]
        return [r for r in records if not states or r.state in states], oldest

    def _newest(self, terms: list[tuple[str | None, JobState | None]], before: int | None, size: int) -> list[tuple]:
        """The ``size`` newest rows before ``before`` of the ``(queue, state)`` pairs ``terms``
        (queue None: no queue; state None: any), each pair read newest first through an index of
        its own (a state filter walks no other state's rows)."""
        parts, params = [], []
        for queue, state in terms:
            where = ["queue IS NULL" if queue is None else "queue = ?"]
            params += [] if queue is None else [queue]
            if state is not None:
                where.append("state = ?")
                params.append(state.value)
            if before is not None:
                where.append("seq < ?")
                params.append(before)
            parts.append(f"SELECT * FROM (SELECT {self._COLS} FROM jobs WHERE {' AND '.join(where)} "
                         "ORDER BY seq DESC LIMIT ?)")
            params.append(size)
        return self._db.execute(f"SELECT * FROM ({' UNION ALL '.join(parts)}) ORDER BY seq DESC LIMIT ?",
                                [*params, size]).fetchall()

    def finished(self, after: tuple[float, int] | None = None, limit: int = 10_000) -> list[JobRecord]:
        """FINISHED jobs in the order they finished (by finish time, then submission): the
        ``limit`` most recent ones, or those that finished after ``after`` = (finish time, seq)
        of the last one already read (the live history's increments)."""
        with self._lock:
            if after is None:
                rows = self._db.execute(
                    f"SELECT {self._COLS} FROM jobs WHERE state=? ORDER BY finish_time DESC, seq DESC LIMIT ?",
                    (JobState.FINISHED.value, limit)).fetchall()[::-1]
            else:
                rows = self._db.execute(
                    f"SELECT {self._COLS} FROM jobs WHERE state=? AND (finish_time, seq) > (?, ?)"
                    " ORDER BY finish_time, seq LIMIT ?",  # a row value: a range of jobs_by_state_finish
                    (JobState.FINISHED.value, after[0], after[1], limit)).fetchall()
        return [r for r in map(self._record, rows) if r.state is JobState.FINISHED]

    def transitions(self, job_id: str | None = None) -> list[Transition]:
        with self._lock:
            q = "SELECT seq, job_id, from_state, to_state, at, reason, attempt, placement FROM transitions"
            rows = (self._db.execute(q + " WHERE job_id=? ORDER BY seq", (job_id,)) if job_id
                    else self._db.execute(q + " ORDER BY seq")).fetchall()
        out = []
        for s, j, f, t, at, r, a, p in rows:
            try:
                out.append(Transition(s, j, None if f is None else JobState(f), JobState(t), at, r, a, _alloc(p)))
            except (TypeError, ValueError) as exc:
                log.warning("transition %s of job %s cannot be read (%s); skipped", s, j, exc)
        return out

    def runs(self, job_id: str) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, attempt, placement, started, ended, end_reason, measured_throughput,"
                " predicted_throughput, start_step FROM runs WHERE job_id=? ORDER BY attempt", (job_id,)).fetchall()
        out = []
        for j, a, p, s, e, r, m, pr, st in rows:
            try:
                out.append(RunRecord(j, a, _alloc(p) or (), s, e, r, _finite(m), _finite(pr), _step(st)))
            except (TypeError, ValueError) as exc:
                log.warning("run %s of job %s cannot be read (%s); skipped", a, j, exc)
        return out

    def measurements(self, limit: int) -> list["Measurement"]:
        """The ``limit`` most recently started runs that have both a measured and a predicted
        throughput (oldest first): the contention learner's input. Rows that cannot be read are skipped
        (the text columns are read as bytes and decoded here: a row edited to hold bytes that are
        not UTF-8 failed the whole query, every refit and ``calibrate --from-state``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT CAST(r.job_id AS BLOB), r.attempt, CAST(j.spec AS BLOB), CAST(r.placement AS BLOB),"
                " r.measured_throughput, r.predicted_throughput, r.ended"
                " FROM runs r JOIN jobs j ON j.id = r.job_id"
                " WHERE r.measured_throughput > 0 AND r.predicted_throughput > 0"
                " ORDER BY r.started DESC, r.job_id DESC, r.attempt DESC LIMIT ?", (limit,)).fetchall()
        out = []
        for raw_id, attempt, spec, placement, measured, predicted, ended in rows[::-1]:
            job_id = _utf8_shown(raw_id)
            measured, predicted = _finite(measured), _finite(predicted)
            if measured is None or predicted is None or not (
                    measured <= MAX_THROUGHPUT and predicted <= MAX_THROUGHPUT):  # stored unchecked, or by hand
                log.warning("run %s of job %s has no finite throughputs up to %g samples/s; not learned from", attempt,
                            job_id, MAX_THROUGHPUT)
                continue
            try:
                parsed = LiveJobSpec.model_validate_json(_utf8("spec", spec))
                out.append(Measurement(_utf8("job id", raw_id), int(attempt), parsed.model, parsed.gpus,
                                       _alloc(_utf8("placement", placement)) or (), measured, predicted, _num(ended),
                                       parsed.queue))
            except (TypeError, ValueError) as exc:
                log.warning("run %s of job %s cannot be read for learning (%s); skipped", attempt, job_id, exc)
        return out


@dataclass(frozen=True, slots=True)
class Measurement:
    """A run's latest measured throughput beside the prediction recorded with it (the contention
    learner's input, :mod:`deepshare.runtime.learning`)."""

    job_id: str
    attempt: int
    model: str
    gpus: int
    placement: NodeAlloc
    measured_throughput: float
    predicted_throughput: float
    ended: float | None
    queue: str | None = None
    """The queue its spec fixed (under ``--tenants``, every tenant's job has one; None: none)."""


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it ends some on an error);
    a rollback that fails is logged, so that the error that led to it is the one raised."""
    if not db.in_transaction:
        return
    try:
        db.execute("ROLLBACK")
    except sqlite3.Error as exc:
        log.error("journal: rolling back a failed transaction failed too (%s)", exc)


def _spec_queues(db: sqlite3.Connection) -> Iterator[tuple[str, str]]:
    """``(queue, job id)`` of every job whose spec fixes a queue, read as the job's spec is read
    everywhere else (Python's JSON: of two ``queue`` keys the last counts, where SQLite's
    ``json_extract`` takes the first)."""
    for job_id, spec in db.execute("SELECT id, spec FROM jobs").fetchall():
        try:
            doc = json.loads(spec)
        except (TypeError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("queue"), str):
            yield doc["queue"], job_id


def _has_queue(db: sqlite3.Connection) -> bool:
    return any(row[1] == "queue" for row in db.execute("PRAGMA table_info(jobs)"))


def _has_indexes(db: sqlite3.Connection) -> bool:
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    return INDEX_NAMES <= names


def _refuse_stale_sidecars(path: Path, state_dir: str | Path) -> None:
    """Refuse to create a journal at ``path`` while its ``-wal`` or ``-shm`` file is there: they
    belong to a journal moved away without them (after a crash the WAL holds its last
    transactions), and SQLite replays a WAL it finds onto the new file, mixing the old journal's
    pages into the new one (a corrupt journal whose every tick failed)."""
    left = [p for p in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")) if p.exists()]
    if left:
        names = " and ".join(p.name for p in left)
        raise DeepShareError(f"--state {state_dir}: {path} is missing but its {names} are still there (a journal "
                             f"moved away without them, whose last transactions they may hold); move them next to "
                             f"it, renamed after it (NAME-wal, NAME-shm), or delete them if that journal is not "
                             f"wanted, then start again")


def _refuse_unmade_sidecars(path: Path, state_dir: str | Path, flag: str) -> None:
    """Refuse, saying why, a journal in WAL mode (every journal is) that SQLite cannot read
    read-only: it reads one through its ``-wal`` and ``-shm`` files, creating them when no process
    has the journal open, and where they are missing and cannot be created (a read-only mount or
    snapshot, another user's folder) it answers "unable to open database file", which read as
    "not a journal"."""
    try:
        target = resolved(path)
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            header = os.read(fd, 20)
        finally:
            os.close(fd)
        if len(header) < 20 or not header.startswith(b"SQLite format 3\x00") or header[18] != 2:
            return  # not SQLite, or not in WAL mode: read (or refused) as it is
        if all(os.path.exists(f"{target}{suffix}") for suffix in ("-wal", "-shm")) or os.access(target.parent, os.W_OK):
            return
    except OSError:  # reported by the checks that follow
        return
    raise DeepShareError(f"{flag} {state_dir}: cannot read {path} read-only in {target.parent}: SQLite reads a journal "
                         "through its -wal and -shm files, which no running scheduler has made there and this user "
                         "cannot create (a read-only mount or snapshot, another user's folder); copy the folder "
                         "somewhere writable, or run as the scheduler's user")


def _check_is_journal(path: Path, state_dir: str | Path, flag: str = "--state", moved: str = MOVE_AWAY) -> None:
    """Refuse ``path`` unless it holds the journal's tables and epoch, reading it read-only: the
    WAL switch and the chmod that opening it for real does must never touch a file that is not a
    journal (nor, through a symlink, someone else's file). Errors name ``flag`` and end in
    ``moved``, the advice."""
    try:
        db = sqlite3.connect(f"{resolved(path).as_uri()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            epoch = db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone() if "meta" in tables else None
            # SQLite keeps no page checksums: a damaged page of the jobs table let the scheduler
            # start and then failed every tick. quick_check reads every page once.
            try:
                damage = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
            except sqlite3.DatabaseError as exc:
                damage = [str(exc)]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise DeepShareError(f"{flag} {state_dir}: {path} is not a journal ({exc}); {moved}") from None
    if damage != ["ok"]:
        raise DeepShareError(f"{flag} {state_dir}: {path} is damaged ({'; '.join(damage)[:200]}); restore it from "
                             f"a backup, or {moved}")
    if not TABLES <= tables or epoch is None:
        missing = ", ".join(sorted(TABLES - tables)) or "meta.epoch"
        raise DeepShareError(f"{flag} {state_dir}: {path} is not a journal (missing {missing}); {moved}")


MAX_COUNT = 2**62
"""The largest attempt or preemption count a readable row may hold."""
MAX_SEQ = 2**63 - 1
"""The largest job number (SQLite's largest integer)."""


def _whole(name: str, value: Any, least: int, most: int = MAX_COUNT) -> None:
    """A row's integer column, or a ValueError naming it (a text seq broke every later submission;
    a huge attempt, the next launch)."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValueError(f"{name}: {str(value)[:40]!r} is not a whole number from {least} to {most}")


def _real(name: str, value: Any, *, nonnegative: bool = False) -> None:
    """A row's time or GPU-seconds column, or a ValueError naming it: a finite number (>= 0 where
    ``nonnegative``)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (nonnegative and value < 0)):
        kind = "a finite number of 0 or more" if nonnegative else "a finite number"
        raise ValueError(f"{name}: {str(value)[:40]!r} is not {kind}")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _finite(value: Any) -> float | None:
    """A job's reported counter as a finite float, None for anything else: a value an older
    version stored unchecked (a string, an infinity) reads as "not reported", never as an error
    that every API answer would repeat."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _utf8(name: str, value: Any) -> Any:
    """A text column read as bytes (``CAST(... AS BLOB)``), decoded; a ValueError naming the column
    for bytes that are not UTF-8. Anything else (None, a number) is returned as it is."""
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: {_bad_byte(value, exc)}") from None


def _bad_byte(raw: bytes, exc: UnicodeDecodeError) -> str:
    """What ``exc`` found wrong in ``raw``: its first byte that is not UTF-8."""
    return f"byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8"


class NotUtf8(str):
    """A text value whose bytes are not UTF-8 (a row edited by hand), as its text with the bad
    bytes escaped (``\\xff``): every read of the journal goes on, and the row it is in can be
    shown, quarantined and deleted. :attr:`problem` names the first bad byte."""

    problem: str
    raw: bytes
    """The bytes the journal holds."""

    def __new__(cls, raw: bytes, problem: str) -> "NotUtf8":
        self = super().__new__(cls, raw.decode("utf-8", "backslashreplace"))
        self.problem, self.raw = problem, raw
        return self


def text_or_escaped(raw: bytes) -> str:
    """The journal's ``text_factory``: a text value decoded from UTF-8, or a :class:`NotUtf8`
    (Python's own factory raised ``sqlite3.OperationalError`` for the whole read, so one edited
    row failed every tick of a running scheduler and every read of the API)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return NotUtf8(raw, _bad_byte(raw, exc))


def _rekey(db: sqlite3.Connection, job_id: NotUtf8, seq: Any) -> str:
    """Give a job whose id is not UTF-8 its escaped id (in its transitions and runs too), inside
    the quarantine's transaction: the row can then be found, shown and deleted by that id. An
    escaped id another job already has gets a suffix. A row another reader rekeyed since this one
    read it (``seq``: its number, unique) keeps the id it was given (a second rekey gave a suffixed
    id no row has)."""
    if db.execute("SELECT 1 FROM jobs WHERE id = CAST(? AS TEXT)", (job_id.raw,)).fetchone() is None:
        row = db.execute("SELECT id FROM jobs WHERE seq = ?", (seq,)).fetchone()
        return str(job_id) if row is None else str(row[0])
    new, suffix = str(job_id), 1
    while db.execute("SELECT 1 FROM jobs WHERE id = ?", (new,)).fetchone() is not None:
        new, suffix = f"{job_id}~{suffix}", suffix + 1
    for table, column in (("jobs", "id"), ("runs", "job_id"), ("transitions", "job_id")):
        db.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = CAST(? AS TEXT)", (new, job_id.raw))
    return new


def _utf8_shown(value: Any) -> str:
    """A text column read as bytes, for a log line (bytes that are not UTF-8 escaped)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _step(value: Any) -> int | None:
    """A job's reported step as an int from 0 to 2**53, None for anything else (see :func:`_finite`)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEP else None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _placeholder_spec(job_id: str, raw: Any, queue: Any = None) -> LiveJobSpec:
    """A stand-in spec for a quarantined job, keeping what can still be read of its name, GPUs and
    model, and its queue from the journal's column (so it stays its queue's tenant's alone)."""
    try:
        doc = json.loads(raw) if isinstance(raw, str) else {}
    except (ValueError, RecursionError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    gpus = doc.get("gpus")
    model = doc.get("model")
    return LiveJobSpec.model_construct(
        name=job_id.rsplit("-", 1)[0], gpus=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else 1,
        model=model[:64] if isinstance(model, str) and model else "unknown", entrypoint=None, command=["?"], args=[],
        checkpoint_dir="?", working_dir=None, env={}, expected_duration_s=None, total_samples=None,
        queue=queue if isinstance(queue, str) else None,
    )
