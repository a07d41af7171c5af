"""The scheduler's durable journal: jobs, their states, every transition and every run (SQLite, WAL).

The journal is the scheduler's only memory. A job moves through a small state machine
(:data:`ALLOWED`); every move is a compare-and-set on the current state inside one transaction
that also appends to ``transitions``, so a crash leaves either the old or the new state, never
half of a move. A launch is journalled (state RUNNING, attempt + 1, placement) *before* the
placement group is created; recovery therefore knows every run that might exist on the cluster
and either re-attaches to it or removes it and requeues the job, so a job never runs twice at
once and is never lost.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from deepshare.core.types import DeepShareError
from deepshare.runtime.spec import LiveJobSpec


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})
ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
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
    predicted_throughput REAL, cancel_requested INTEGER NOT NULL DEFAULT 0, error TEXT, finish_time REAL
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


def _alloc_json(alloc: NodeAlloc | None) -> str | None:
    return None if alloc is None else json.dumps([[n, g] for n, g in alloc])


def _alloc(text: str | None) -> NodeAlloc | None:
    return None if text is None else tuple((str(n), int(g)) for n, g in json.loads(text))


class Journal:
    """SQLite journal at ``<state dir>/journal.sqlite``; thread-safe (one connection, one lock)."""

    def __init__(self, state_dir: str | Path, clock: Any = time.time) -> None:
        self.dir = Path(state_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.dir / "journal.sqlite", check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise DeepShareError(f"--state {state_dir}: cannot open the journal ({exc})") from None
        self._lock = threading.RLock()
        self._clock = clock
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('epoch', ?)", (repr(self._clock()),))
        self.epoch = float(self._db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def now(self) -> float:
        return float(self._clock())

    class _Tx:
        def __init__(self, journal: "Journal") -> None:
            self.j = journal

        def __enter__(self) -> sqlite3.Connection:
            self.j._lock.acquire()
            self.j._db.execute("BEGIN IMMEDIATE")
            return self.j._db

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            try:
                self.j._db.execute("ROLLBACK" if exc_type else "COMMIT")
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
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0]
            job_id = f"{spec.name}-{seq}"
            db.execute(
                "INSERT INTO jobs (id, seq, spec, state, submit_time, queued_since) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, seq, spec_json(spec), JobState.QUEUED.value, now, now),
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
        row = db.execute("SELECT state, attempt, run_started, placement FROM jobs WHERE id=?", (job_id,)).fetchone()
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
        """RUNNING -> ``new`` for run ``attempt`` (a stale attempt is refused); accounts the run's GPU time."""
        now = self.now()
        with self._tx() as db:
            row = self._move(db, job_id, JobState.RUNNING, new)
            if int(row[1]) != attempt:
                raise TransitionError(f"job {job_id!r} is on run {row[1]}, not {attempt}")
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

    def request_cancel(self, job_id: str) -> None:
        """Mark a running job for cancellation; the control loop stops it."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET cancel_requested=1 WHERE id=?", (job_id,))

    def record_progress(self, job_id: str, attempt: int, samples: float | None, step: int | None,
                        throughput: float | None, predicted: float | None) -> None:
        """The latest report of run ``attempt`` and the current prediction for its placement."""
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
        (job_id, seq, spec, state, submit, attempt, preemptions, placement, run_started, queued_since, last_run_s,
         attained, samples, step, thp, pred, cancel, error, finish) = row
        return JobRecord(
            job_id=job_id, seq=seq, spec=LiveJobSpec.model_validate_json(spec), state=JobState(state),
            submit_time=submit, attempt=attempt, preemptions=preemptions, placement=_alloc(placement),
            run_started=run_started, queued_since=queued_since, last_run_s=last_run_s, attained_gpu_s=attained,
            samples=samples, step=step, throughput=thp, predicted_throughput=pred, cancel_requested=bool(cancel),
            error=error, finish_time=finish,
        )

    _COLS = ("id, seq, spec, state, submit_time, attempt, preemptions, placement, run_started, queued_since,"
             " last_run_s, attained_gpu_s, samples, step, throughput, predicted_throughput, cancel_requested, error,"
             " finish_time")

    def get(self, job_id: str) -> JobRecord:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return self._record(row)

    def jobs(self, *states: JobState) -> list[JobRecord]:
        """Jobs in submission order, all or those in ``states``."""
        with self._lock:
            if states:
                marks = ",".join("?" * len(states))
                rows = self._db.execute(f"SELECT {self._COLS} FROM jobs WHERE state IN ({marks}) ORDER BY seq",
                                        [s.value for s in states]).fetchall()
            else:
                rows = self._db.execute(f"SELECT {self._COLS} FROM jobs ORDER BY seq").fetchall()
        return [self._record(r) for r in rows]

    def transitions(self, job_id: str | None = None) -> list[Transition]:
        with self._lock:
            q = "SELECT seq, job_id, from_state, to_state, at, reason, attempt, placement FROM transitions"
            rows = (self._db.execute(q + " WHERE job_id=? ORDER BY seq", (job_id,)) if job_id
                    else self._db.execute(q + " ORDER BY seq")).fetchall()
        return [Transition(s, j, None if f is None else JobState(f), JobState(t), at, r, a, _alloc(p))
                for s, j, f, t, at, r, a, p in rows]

    def runs(self, job_id: str) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, attempt, placement, started, ended, end_reason, measured_throughput,"
                " predicted_throughput, start_step FROM runs WHERE job_id=? ORDER BY attempt", (job_id,)).fetchall()
        return [RunRecord(j, a, _alloc(p) or (), s, e, r, m, pr, st) for j, a, p, s, e, r, m, pr, st in rows]
