"""What a long-lived scheduler's journal costs its reads: N ended jobs, with and without the indexes.

Builds a journal holding ``--jobs`` ended jobs (each with one run and its transitions), then times,
side by side on the same rows, the reads the scheduler makes as it runs: every tick the live
history's read of the jobs finished since the last tick (:meth:`Journal.finished` after a mark),
every refit the learner's read of the newest measured runs (:meth:`Journal.measurements`), a job's
transitions (``deepshare jobs ID``), the metrics' counts, and one ``--keep-finished`` prune batch.
"without" is the same journal with the finish-time, run-start and transitions indexes dropped (a
journal before they existed). Median of ``--repeats`` reads, milliseconds. Figures only: nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from record import Record, add_json_flag

from deepshare.runtime.journal import JOURNAL_FILE, PRUNE_BATCH, Journal
from deepshare.runtime.spec import spec_from_json

NEW_INDEXES = ("jobs_by_state_finish", "runs_by_start", "transitions_by_job")
SPEC = dict(name="j", gpus=1, model="ResNet50", entrypoint="m:f", checkpoint_dir="/tmp/ckpt")


def build(state: Path, jobs: int) -> float:
    """A journal of ``jobs`` finished jobs (submitted, launched, finished: one run, three
    transitions each) and one queued job; returns the time the last one finished."""
    journal = Journal(state)
    journal.submit(spec_from_json(SPEC))
    spec = journal._db.execute("SELECT spec FROM jobs").fetchone()[0]
    start = time.time() - jobs - 100.0
    with journal._tx() as db:
        db.executemany(
            "INSERT INTO jobs (id, seq, spec, state, submit_time, queued_since, attempt, finish_time, attained_gpu_s)"
            " VALUES (?, ?, ?, 'finished', ?, ?, 1, ?, 10.0)",
            ((f"j-{i}", i, spec, start + i, start + i, start + i + 10.0) for i in range(2, jobs + 2)))
        db.executemany(
            "INSERT INTO runs (job_id, attempt, placement, started, ended, end_reason, measured_throughput,"
            " predicted_throughput) VALUES (?, 1, '[[\"node0\", 1]]', ?, ?, 'finished', 5.0, 5.0)",
            ((f"j-{i}", start + i, start + i + 10.0) for i in range(2, jobs + 2)))
        db.executemany(
            "INSERT INTO transitions (job_id, from_state, to_state, at, reason, attempt) VALUES (?, ?, ?, ?, ?, 1)",
            ((f"j-{i}", old, new, start + i, reason) for i in range(2, jobs + 2)
             for old, new, reason in ((None, "queued", "submitted"), ("queued", "running", "launched"),
                                      ("running", "finished", "finished"))))
    journal.submit(spec_from_json(SPEC))  # the newest: queued
    journal.close()
    return start + jobs + 11.0


def median_ms(read: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()
        times.append(1000.0 * (time.perf_counter() - started))
    return statistics.median(times)


def measure(state: Path, last_finish: float, jobs: int, repeats: int) -> dict[str, float]:
    journal = Journal.read_only(state)  # opens without upgrading: the indexes stay as they are
    try:
        middle = f"j-{jobs // 2}"
        return {
            "history read per tick": median_ms(lambda: journal.finished((last_finish, jobs + 1)), repeats),
            "refit read (2,000 newest runs)": median_ms(lambda: journal.measurements(2000), repeats),
            "a job's transitions": median_ms(lambda: journal.transitions(middle), repeats),
            "metrics counts": median_ms(journal.counts, repeats),
        }
    finally:
        journal.close()


def prune_ms(state: Path, cutoff: float) -> float:
    journal = Journal.__new__(Journal)  # the file as it is (opening it would make the indexes): a connection only
    journal._db = sqlite3.connect(state / JOURNAL_FILE, isolation_level=None, check_same_thread=False)
    journal._lock, journal._clock = threading.RLock(), time.time
    try:
        started = time.perf_counter()
        deleted = journal.prune(cutoff, PRUNE_BATCH)
        assert len(deleted) == PRUNE_BATCH, len(deleted)
        return 1000.0 * (time.perf_counter() - started)
    finally:
        journal._db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=5)
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("journal_scale", args.json)
    root = Path(tempfile.mkdtemp(prefix="journal-scale-"))
    try:
        with_dir, without_dir = root / "with", root / "without"
        last_finish = build(with_dir, args.jobs)
        shutil.copytree(with_dir, without_dir)
        db = sqlite3.connect(without_dir / JOURNAL_FILE)
        db.executescript("".join(f"DROP INDEX {name};" for name in NEW_INDEXES) + "PRAGMA wal_checkpoint(TRUNCATE);")
        db.close()
        results = {"with": measure(with_dir, last_finish, args.jobs, args.repeats),
                   "without": measure(without_dir, last_finish, args.jobs, args.repeats)}
        cutoff = last_finish  # every job but the newest two ended before it
        results["with"]["prune one batch"] = prune_ms(with_dir, cutoff)
        results["without"]["prune one batch"] = prune_ms(without_dir, cutoff)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"journal of {args.jobs:,} ended jobs; median of {args.repeats} reads, ms")
    print(f"{'read':34s} {'with':>10s} {'without':>10s}")
    for name, value in results["with"].items():
        print(f"{name:34s} {value:10.2f} {results['without'][name]:10.2f}")
        record.add(f"{name}, {args.jobs:,} ended jobs", value, "ms")
        record.add(f"{name}, {args.jobs:,} ended jobs, without the indexes", results["without"][name], "ms")
    record.write()


if __name__ == "__main__":
    main()
