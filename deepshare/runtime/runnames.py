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
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sqlite3
from dataclasses import dataclass

from deepshare.core.errors import DeepShareError

log = logging.getLogger(__name__)

INSTANCE_KEY = "instance"
LEGACY_KEY = "legacy_runs"
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
        return RunNames(instance, frozenset(legacy))
    instance = row[0]
    if not isinstance(instance, str) or not INSTANCE_RE.match(instance):
        raise DeepShareError(f"{where}: meta.instance: expected 8 to 32 lowercase hex digits, got {str(instance)[:40]!r}")
    return RunNames(instance, _legacy(db, where))


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
