"""Event heap: time-ordered, with a kind priority and an insertion counter to break ties.

Equal times pop in a fixed order (completions, then arrivals, then round ticks and control
timers together, by insertion), so the same inputs always give the same event sequence.

Arrivals are known up front and never change, so they are not heap entries: they are a stream
sorted once by (time, trace position) that :meth:`EventQueue.pop` merges with the heap. That
is the order the heap gave them when every arrival was pushed at the start in trace order
(arrivals only ever tie with arrivals on the counter), at 8 bytes a job instead of a heap
tuple, and the heap holds only the events of jobs in the system.
"""

from __future__ import annotations

import heapq
from array import array
from enum import IntEnum
from itertools import count
from typing import Sequence


class EventKind(IntEnum):
    COMPLETION = 0
    ARRIVAL = 1
    ROUND = 2
    TIMER = 3
    """A cluster control's timer (``version`` carries its token). It ranks with ROUND: at equal
    times ticks and timers pop in the order they were pushed, as when timers rode ROUND."""


_RANK = {EventKind.COMPLETION: 0, EventKind.ARRIVAL: 1, EventKind.ROUND: 2, EventKind.TIMER: 2}
"""Tie-break priority at equal times (lower pops first)."""
_ARRIVAL = _RANK[EventKind.ARRIVAL]


class EventQueue:
    def __init__(self, arrival_times: Sequence[float] = ()) -> None:
        """``arrival_times[i]``: when the job at trace position ``i`` arrives; its arrival pops
        as ``(time, ARRIVAL, "", i)``."""
        self._heap: list[tuple[float, int, int, EventKind, str, int]] = []  # (time, rank, seq, kind, ...)
        self._seq = count()
        order = sorted(range(len(arrival_times)), key=arrival_times.__getitem__)  # stable: ties by position
        self._arrival_order = array("q", order)
        self._arrival_times = array("d", (arrival_times[i] for i in order))
        self._next_arrival = 0

    def push(self, time: float, kind: EventKind, job_id: str = "", version: int = 0) -> None:
        if kind is EventKind.ARRIVAL:
            raise ValueError("arrivals are given to the constructor")
        heapq.heappush(self._heap, (time, _RANK[kind], next(self._seq), kind, job_id, version))

    def _arrival_first(self) -> bool:
        i = self._next_arrival
        if i >= len(self._arrival_times):
            return False
        if not self._heap:
            return True
        top = self._heap[0]
        t = self._arrival_times[i]
        return t < top[0] or (t == top[0] and _ARRIVAL < top[1])

    def pop(self) -> tuple[float, EventKind, str, int]:
        if self._arrival_first():
            i = self._next_arrival
            self._next_arrival = i + 1
            return self._arrival_times[i], EventKind.ARRIVAL, "", self._arrival_order[i]
        time, _, _, kind, job_id, version = heapq.heappop(self._heap)
        return time, kind, job_id, version

    def skip_arrivals(self, n: int) -> None:
        """Drop the next ``n`` arrivals unpopped (jobs a caller set up itself, e.g.
        :meth:`~deepshare.core.simulator.Simulator.from_view`'s known jobs)."""
        if not 0 <= n <= len(self._arrival_times) - self._next_arrival:
            raise ValueError(f"cannot skip {n} arrivals: {len(self._arrival_times) - self._next_arrival} are left")
        self._next_arrival += n

    def peek_time(self) -> float | None:
        if self._arrival_first():
            return self._arrival_times[self._next_arrival]
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap) + len(self._arrival_times) - self._next_arrival
