"""How long the live scheduler keeps ended jobs (``deepshare scheduler start --keep-finished DAYS``).

Without it the journal keeps every job, and the state folder every job's rank logs, for as long
as the scheduler runs: a scheduler placing thousands of jobs a day grows both without bound. With
it the control loop deletes, about once a minute, the jobs that ended (finished, failed or
cancelled) more than ``DAYS`` ago, with their transitions, runs and logs folders. What a deleted
job was is then gone: ``deepshare jobs ID`` answers that the job is unknown, and a restarted
scheduler's forecasts (its live history) and learned contention model start from the jobs kept.
Checkpoint folders are the jobs' own (``checkpoint_dir``) and are left as they are.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from deepshare.runtime.defaults import DAY_S
from deepshare.runtime.journal import PRUNE_BATCH, Journal
from deepshare.runtime.logs import remove_job_logs

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 60.0
"""Journal-clock seconds between two prunes."""
PRUNE_BUDGET_S = 0.25
"""Seconds one prune may spend deleting batches (a backlog, the first prune of an old journal,
goes over several prunes instead of holding up one tick)."""


@dataclass
class Retention:
    """Deletes the ended jobs older than ``keep_s`` from ``journal`` when a prune is due."""

    keep_s: float
    every_s: float = PRUNE_EVERY_S
    budget_s: float = PRUNE_BUDGET_S
    clock: Callable[[], float] = time.perf_counter
    """Seconds for the budget (a test's clock)."""
    _last: float | None = None

    def prune(self, journal: Journal) -> list[str]:
        """The ids deleted by this call: none unless a prune is due (``every_s`` after the last,
        journal clock), else batches of the ended jobs older than ``keep_s`` until fewer than a
        batch are left or the budget is spent. Each job's logs folder is removed before the job
        (a scheduler stopped in between leaves jobs, not folders nothing would remove); one that
        cannot be removed is logged and left, and the job deleted all the same."""
        now = journal.now()
        if self._last is not None and now - self._last < self.every_s:
            return []
        self._last = now
        started, deleted = self.clock(), []
        while True:
            batch = journal.prunable(now - self.keep_s, PRUNE_BATCH)
            for job_id in batch:  # the folders first: a stop in between leaves jobs the next prune deletes
                try:
                    remove_job_logs(journal.dir, job_id)
                except (OSError, ValueError) as exc:
                    log.warning("job %s: its logs folder was not removed (%s)", job_id, exc)
            deleted += journal.delete_ended(batch)
            if len(batch) < PRUNE_BATCH or self.clock() - started >= self.budget_s:
                break
        if deleted:
            log.info("deleted %d job(s) that ended more than %g day(s) ago", len(deleted), self.keep_s / DAY_S)
        return deleted
