"""Tiresias' 2D-Gittins index: which job to serve next when job lengths are unknown but their
distribution is not.

For a job that has attained ``a`` GPU-seconds of service, with the total service ``S`` of a job
distributed as the finished jobs' service, the Gittins index is

    G(a) = max over quanta D > 0 of  P(S - a <= D | S > a) / E[min(S - a, D) | S > a]

the best rate at which serving the job for a while can finish it (Gittins; Tiresias, NSDI'19,
2D-Gittins). The highest index goes first. On an empirical distribution the maximum is reached at
a quantum that ends exactly at one of the samples above ``a``, so it is a maximum over those:
O(samples above ``a``) with NumPy. A job that has outlived every finished job has index 0 (the
lowest). Tiresias discretises attained service into a few queues so that priorities change
rarely (fewer preemptions); here the index is taken at the start of the job's
:data:`GITTINS_STEP`-wide bin of attained service (factors of 2^(1/4), ~19%), which keeps that
effect, bounds the index's cost by the number of bins in use, and lets one decision share each
bin's index between its jobs.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from deepshare.core.history import JobHistory

GITTINS_STEP = 2 ** 0.25
"""Width of an attained-service bin, as a factor (service below 1 GPU-second is one bin, 0)."""
_LOG_STEP = math.log(GITTINS_STEP)
MIN_SERVICE_S = 1e-6
"""The least expected service (GPU-seconds) an index divides by."""


def gittins_index(samples: np.ndarray, attained: float) -> float:
    """G(``attained``) on the empirical distribution of ``samples`` (sorted ascending); 0 when no
    sample exceeds ``attained``."""
    k = int(np.searchsorted(samples, attained, side="right"))
    tail = samples[k:]
    m = tail.size
    if m == 0:
        return 0.0
    done = np.arange(1, m + 1, dtype=float)  # jobs finished by a quantum ending at tail[j - 1]
    # m * E[min(S - a, D)] = sum of the finished ones' (s - a) + the survivors' D
    served = np.cumsum(tail) - done * attained + (m - done) * (tail - attained)
    # At least a microsecond of GPU service per finished job: a history of near-zero run times
    # would otherwise give an infinite (or overflowing) rate.
    return float(np.max(done / np.maximum(served, MIN_SERVICE_S)))


def attained_bin(attained: float) -> float:
    """The start of ``attained``'s bin: 0 below 1 GPU-second, else the largest power of
    :data:`GITTINS_STEP` at or below it."""
    if attained < 1.0:
        return 0.0
    level = math.floor(math.log(attained) / _LOG_STEP + 1e-12)
    return GITTINS_STEP ** level


def gittins_priority(history: JobHistory) -> Callable[[float], float]:
    """``priority(attained)``: the Gittins index of ``attained``'s bin on ``history``'s finished
    jobs (0 for every job while none has finished: the order then falls back to its tie-break),
    remembered until the history grows."""
    memo = history.memo()
    samples = history.service_samples()

    def priority(attained: float) -> float:
        start = attained_bin(attained)
        question = ("gittins", start)
        value = memo.get(question)
        if value is None:
            value = memo[question] = gittins_index(samples, start) if samples.size else 0.0
        return value

    return priority
