"""GPU usage per queue against quotas: the one rule admission and reclaim both check.

A queue ``q`` may hold ``u`` GPUs when

1. ``u <= nominal + borrowing limit`` (its own cap), and
2. its pool (its cohort, or itself alone) is not overdrawn: each member ``p`` draws
   ``max(0, u_p - reserved_p)`` from the pool (``reserved_p`` = nominal - lending limit, 0 without
   a limit), and the draws together stay within the pool, the sum of the members' lendable GPUs.

Without lending limits the pool is the sum of the nominal quotas and rule 2 reads "the cohort
uses at most its quotas' sum". A queue within its nominal quota can be refused only because
others of its cohort borrow: that is when :mod:`deepshare.tenants.reclaim` steps in. Sums are
kept as usage changes, so a check is O(1) whatever the number of queues.
"""

from __future__ import annotations

from typing import Iterable

from deepshare.tenants.spec import Queue, Tenanted, Tenants


class Ledger:
    """GPUs held per queue (running jobs, plus what admission reserved) and per pool."""

    __slots__ = ("tenants", "usage", "drawn")

    def __init__(self, tenants: Tenants) -> None:
        self.tenants = tenants
        self.usage: dict[str, int] = dict.fromkeys(tenants.queues, 0)
        self.drawn: dict[tuple[str, str], int] = dict.fromkeys(tenants.pools, 0)

    @classmethod
    def of(cls, tenants: Tenants, jobs: Iterable[Tenanted]) -> "Ledger":
        """The usage of ``jobs`` (a view's running jobs), unchecked: a quota lowered by hand may
        leave a queue over it, and admission then waits for it to drain (or reclaims)."""
        ledger = cls(tenants)
        for job in jobs:
            ledger.add(tenants.queue(tenants.queue_of(job), job), job.gpus)
        return ledger

    def copy(self) -> "Ledger":
        other = Ledger.__new__(Ledger)
        other.tenants, other.usage, other.drawn = self.tenants, dict(self.usage), dict(self.drawn)
        return other

    @staticmethod
    def _draw(queue: Queue, used: int) -> int:
        over = used - queue.reserved_gpus
        return over if over > 0 else 0

    def admits(self, queue: Queue, gpus: int) -> bool:
        """Whether ``queue`` may hold ``gpus`` more (module doc's rules 1 and 2)."""
        used = self.usage[queue.name]
        after = used + gpus
        if after > queue.limit_gpus:
            return False
        key = queue.pool_key
        return self.drawn[key] - self._draw(queue, used) + self._draw(queue, after) <= self.tenants.pools[key]

    def add(self, queue: Queue, gpus: int) -> None:
        used = self.usage[queue.name]
        self.drawn[queue.pool_key] += self._draw(queue, used + gpus) - self._draw(queue, used)
        self.usage[queue.name] = used + gpus

    def remove(self, queue: Queue, gpus: int) -> None:
        self.add(queue, -gpus)

    def borrowed(self, queue: Queue) -> int:
        """GPUs it holds above its nominal quota."""
        over = self.usage[queue.name] - queue.nominal_gpus
        return over if over > 0 else 0

    def within_nominal(self, queue: Queue, gpus: int) -> bool:
        """Whether it would hold at most its nominal quota with ``gpus`` more."""
        return self.usage[queue.name] + gpus <= queue.nominal_gpus
