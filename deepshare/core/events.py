"""Event heap: time-ordered, with a kind priority and an insertion counter to break ties.

Equal times pop in a fixed order (completions, then arrivals, then round ticks, then by
insertion), so the same inputs always give the same event sequence.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from itertools import count


class EventKind(IntEnum):
    COMPLETION = 0
    ARRIVAL = 1
    ROUND = 2


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = count()

    def push(self, time: float, kind: EventKind, job_id: str = "", version: int = 0) -> None:
        heapq.heappush(self._heap, (time, int(kind), next(self._seq), job_id, version))

    def pop(self) -> tuple[float, EventKind, str, int]:
        time, kind, _, job_id, version = heapq.heappop(self._heap)
        return time, EventKind(kind), job_id, version

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
