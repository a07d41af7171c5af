"""The queued jobs of one decision point, read through the simulator's queue instead of copied.

Copying the whole queue into a tuple at every decision point costs O(queue) per decision: on a
trace where thousands of jobs wait, that alone makes a run quadratic. :class:`PendingJobs` is
the ``ClusterView.queued`` the simulator hands out instead. It reads the live queue (a dict in
arrival order, never changed while a policy decides) and, for callers that keep an index of
the queue across decisions (:class:`deepshare.policies.queue_index.QueueIndex`), it answers
:meth:`PendingJobs.changes`: the jobs added to and removed from the queue since an earlier
view of the same simulation, so such a caller pays O(changes), not O(queue), per decision.

Exactness is kept whatever the caller does: before the simulator changes its queue, the view
still alive (the simulator holds it weakly) copies the queue it showed, so a view read after
the simulation moved on still shows the jobs of its own decision point. A caller that drops
the view before :meth:`~deepshare.core.simulator.Simulator.apply` (``Simulator.run`` does)
never pays for that copy.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence, overload

from deepshare.core.view import JobView

Change = tuple[bool, JobView]
"""``(added, job)``: ``True`` for a job that entered the queue, ``False`` for one that left."""


class QueueLog:
    """The simulator's record of queue changes: a list with a global position.

    Only the changes since the view before the current one are kept (:meth:`trim`), so the log
    stays O(changes between two decision points), not O(trace).
    """

    __slots__ = ("entries", "base", "_kept_from")

    def __init__(self) -> None:
        self.entries: list[Change] = []
        self.base = 0
        """Global position of ``entries[0]``."""
        self._kept_from = 0

    @property
    def position(self) -> int:
        """How many changes happened so far (the position of the next one)."""
        return self.base + len(self.entries)

    def add(self, job: JobView) -> None:
        self.entries.append((True, job))

    def remove(self, job: JobView) -> None:
        self.entries.append((False, job))

    def trim(self) -> None:
        """Called at every new view: forget what came before the previous view."""
        drop = self._kept_from - self.base
        if drop > 0:
            del self.entries[:drop]
            self.base = self._kept_from
        self._kept_from = self.position

    def since(self, position: int, until: int) -> list[Change] | None:
        """The changes in ``[position, until)``, or None when they are no longer kept."""
        if position < self.base or position > until or until > self.position:
            return None
        return self.entries[position - self.base : until - self.base]


class PendingJobs(Sequence[JobView]):
    """A read-only sequence of the queued jobs at one decision point, in arrival order."""

    __slots__ = ("_queue", "_items", "_log", "position", "__weakref__")

    def __init__(self, queue: Mapping[str, JobView], log: QueueLog) -> None:
        self._queue: Mapping[str, JobView] | None = queue
        self._items: tuple[JobView, ...] | None = None
        self._log = log
        self.position = log.position
        """The queue-log position of this view: pass it to a later view's :meth:`changes`."""

    def freeze(self) -> None:
        """Copy the queue as it is now: the simulator calls this before changing its queue."""
        if self._queue is not None:
            self._items = tuple(self._queue.values())
            self._queue = None

    @property
    def log(self) -> QueueLog:
        """The simulation's queue log (an identity that tells two simulations apart)."""
        return self._log

    def changes(self, since: int) -> list[Change] | None:
        """What entered and left the queue between the view at position ``since`` and this
        one, in order; None when that is unknown (too old, or from another simulation)."""
        return self._log.since(since, self.position)

    def _tuple(self) -> tuple[JobView, ...]:
        if self._items is None:
            assert self._queue is not None
            self._items = tuple(self._queue.values())
        return self._items

    def __len__(self) -> int:
        return len(self._queue) if self._items is None else len(self._items)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[JobView]:
        if self._items is None:
            return iter(self._queue.values())  # type: ignore[union-attr]
        return iter(self._items)

    @overload
    def __getitem__(self, index: int) -> JobView: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[JobView, ...]: ...

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._tuple()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PendingJobs):
            return self._tuple() == other._tuple()
        if isinstance(other, tuple):
            return self._tuple() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PendingJobs({self._tuple()!r})"
