"""The Ray names of a scheduler's runs, unique to its journal (:class:`RunNames`).

A run's placement group and worker actors are detached and found again by name (a restarted
scheduler re-attaches to them), in the one Ray namespace ``deepshare``. Every journal numbers its
jobs from ``<name>-1``, so names made of the job and attempt alone were the same for two
schedulers on one Ray cluster (or a scheduler whose state folder was wiped while its runs lived
on): the second one's launch failed on "name already exists", its clean-up removed the first
one's run by that name, and its recovery could re-attach to the other's run. So each journal
holds a random *instance id* (``meta.instance``, written when the journal is created) and every
name carries it: placement group ``ds-<instance>-<job>-a<attempt>``, worker actors
``ds-<instance>-<job>-a<attempt>-r<rank>``.

A journal written before instance ids gets one the first time a scheduler opens it, once (inside
one transaction, read again there). Its runs open at that moment were launched under the old
names ``ds-<job>-a<attempt>``: they are recorded with it (``meta.legacy_runs``) and keep their old
names, so the first restart after the upgrade re-attaches to them (or removes them) as before.

A job's checkpoint folder carries the instance id too, ``<checkpoint_dir>/<instance>-<job id>``
(:meth:`RunNames.checkpoint_dir`): with the job id alone, a second journal's first job resumed
from another journal's job of the same id. A journal that has jobs from before this naming
records the first job number that uses it (``meta.checkpoint_names_from``, set once, when a
scheduler first opens it); the jobs before keep ``<checkpoint_dir>/<job id>``, so a job preempted
before the upgrade resumes from its checkpoint after it.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deepshare.core.errors import DeepShareError

if TYPE_CHECKING:
    from deepshare.runtime.spec import LiveJobSpec

log = logging.getLogger(__name__)

INSTANCE_KEY = "instance"
LEGACY_KEY = "legacy_runs"
CHECKPOINT_KEY = "checkpoint_names_from"
"""``meta`` key: the first job number whose checkpoint folder carries the instance id."""
INSTANCE_RE = re.compile(r"[0-9a-f]{8,32}\Z")


def new_instance() -> str:
    """A fresh instance id: 12 random lowercase hex digits."""
    return secrets.token_hex(6)


@dataclass(frozen=True, slots=True)
class RunNames:
    """How one journal's runs are named on Ray (see the module doc)."""

    instance: str
    legacy: frozenset[tuple[str, int]] = frozenset()
    """``(job id, attempt)`` of the runs launched before the journal had an instance id."""
    checkpoint_from: int = 1
    """The first job number whose checkpoint folder carries the instance id (the jobs before
    were journalled by a version whose folders did not)."""

    def checkpoint_dir(self, spec: "LiveJobSpec", job_id: str) -> str:
        """Where job ``job_id`` keeps its checkpoints (see the module doc)."""
        from deepshare.runtime.spec import job_checkpoint_dir

        number = job_id.rsplit("-", 1)[-1]  # a job id is <name>-<number>
        old = number.isascii() and number.isdigit() and int(number) < self.checkpoint_from
        return job_checkpoint_dir(spec, job_id, None if old else self.instance)

    def pg(self, job_id: str, attempt: int) -> str:
        """The run's placement group."""
        if (job_id, attempt) in self.legacy:
            return f"ds-{job_id}-a{attempt}"
        return f"ds-{self.instance}-{job_id}-a{attempt}"

    def actor(self, job_id: str, attempt: int, rank: int) -> str:
        """The worker actor of ``rank``."""
        return f"{self.pg(job_id, attempt)}-r{rank}"


def journal_run_names(db: sqlite3.Connection, where: str) -> RunNames:
    """The journal's :class:`RunNames`, its instance id assigned first if it has none. ``db`` is
    inside a write transaction (so two processes cannot both assign one); ``where`` names the
    journal in a refusal."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (INSTANCE_KEY,)).fetchone()
    if row is None:
        instance = new_instance()
        legacy = sorted(_open_runs(db))
        db.execute("INSERT INTO meta VALUES (?, ?)", (INSTANCE_KEY, instance))
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (LEGACY_KEY, json.dumps([list(r) for r in legacy])))
        if legacy:
            log.info("journal %s: instance id %s assigned; %d run(s) launched before keep their old names",
                     where, instance, len(legacy))
        return RunNames(instance, frozenset(legacy), _checkpoint_from(db, where))
    instance = row[0]
    if not isinstance(instance, str) or not INSTANCE_RE.match(instance):
        raise DeepShareError(f"{where}: meta.instance: expected 8 to 32 lowercase hex digits, got {str(instance)[:40]!r}")
    return RunNames(instance, _legacy(db, where), _checkpoint_from(db, where))


def _checkpoint_from(db: sqlite3.Connection, where: str) -> int:
    """The journal's first job number whose checkpoint folder carries the instance id, set to the
    next job number the first time (inside the caller's write transaction): the jobs already
    journalled keep their folders. A value that is not a whole number is refused in one line
    (read as 1 it would move every old job's folder, as a large one every new job's back)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (CHECKPOINT_KEY,)).fetchone()
    if row is None:
        top = db.execute("SELECT seq FROM jobs WHERE typeof(seq) = 'integer' ORDER BY seq DESC LIMIT 1").fetchone()
        first = 1 if top is None else int(top[0]) + 1
        db.execute("INSERT INTO meta VALUES (?, ?)", (CHECKPOINT_KEY, str(first)))
        if first > 1:
            log.info("journal %s: jobs from number %d keep their checkpoints in <checkpoint_dir>/<instance>-<job id>; "
                     "the %d before keep <checkpoint_dir>/<job id>", where, first, first - 1)
        return first
    text = row[0]
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 19):
        raise DeepShareError(f"{where}: meta.{CHECKPOINT_KEY}: expected a whole number, got {str(text)[:40]!r}")
    return int(text)


def _open_runs(db: sqlite3.Connection) -> set[tuple[str, int]]:
    """``(job id, attempt)`` of every run that may still be on the cluster: runs not ended (a
    running job's, a quarantined job's not yet removed) and running jobs' current attempts."""
    found = set()
    for job_id, attempt in [*db.execute("SELECT job_id, attempt FROM runs WHERE ended IS NULL"),
                            *db.execute("SELECT id, attempt FROM jobs WHERE state = 'running'")]:
        if isinstance(job_id, str) and type(attempt) is int:
            found.add((job_id, attempt))
    return found


def _legacy(db: sqlite3.Connection, where: str) -> frozenset[tuple[str, int]]:
    """The stored legacy runs; an unreadable list is logged and read as none (those runs, if
    any, are then not found at recovery: their jobs are requeued)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (LEGACY_KEY,)).fetchone()
    if row is None:
        return frozenset()
    try:
        doc = json.loads(row[0])
        if not isinstance(doc, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                                and type(p[1]) is int for p in doc):
            raise ValueError("not a list of [job id, attempt] pairs")
    except (TypeError, ValueError, RecursionError) as exc:
        log.warning("%s: meta.%s is not readable (%s); no run keeps its pre-instance name", where, LEGACY_KEY, exc)
        return frozenset()
    return frozenset((p[0], p[1]) for p in doc)
