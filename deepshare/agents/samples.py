"""What probes measure and what the rate computation derives from it.

A probe's :meth:`~deepshare.agents.probes.base.Probe.sample` returns a :class:`ProbeSample`: a
monotonic timestamp plus one :class:`LinkReading` per link. A reading is either a cumulative
``counter`` (raw units since boot, ``unit_bytes`` bytes each, wrapping at ``2**bits``; sysfs,
procfs, NVLink) or an
instantaneous ``rate`` (bytes/s measured by the device itself; NVML's PCIe throughput, the
simulated probe). :func:`compute_rates` turns two samples into :class:`LinkRate` values; it is
pure, so tests give it hand-made samples and check exact numbers.

Utilisation is ``max(rx, tx) / capacity``: links are full duplex and ``capacity`` is the
per-direction bandwidth, so the busier direction is what a new transfer competes with. It is
``None`` when no capacity is known, and is not clipped (a value above 1 means the capacity is
wrong, which is worth seeing); consumers that need 0..1 clip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

ReadingKind = Literal["counter", "rate"]


@dataclass(frozen=True, slots=True)
class LinkReading:
    """One link at one instant: counters (``unit_bytes`` each) or rates (bytes/s), and capacity."""

    rx: float
    tx: float
    kind: ReadingKind = "counter"
    bits: int = 64
    """Counter width: a decrease of a ``bits``-wide counter is a wrap (32) or a reset (64)."""
    unit_bytes: int = 1
    """Bytes per counter unit (4 for InfiniBand's 4-byte words, 1024 for NVLink's KiB)."""
    capacity_bytes_per_s: float | None = None
    """Per-direction bandwidth in bytes/s; ``None`` when unknown."""


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """Everything one probe read at one instant (``timestamp`` from a monotonic clock, seconds)."""

    timestamp: float
    links: Mapping[str, LinkReading] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    """Non-link readings such as ``gpu0/util`` (GPU busy fraction, 0..1)."""


@dataclass(frozen=True, slots=True)
class LinkRate:
    """A link's average traffic between two samples (or its device-measured rate)."""

    link: str
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    utilization: float | None
    capacity_bytes_per_s: float | None = None


WRAP_SLACK = 1.1
"""A 32-bit counter's decrease read as a wrap may imply at most this many times the link's
capacity over the interval; more is a reset (driver reload, ``perfquery -R``), which gives no
rate for that sample."""


def counter_delta(prev: int, cur: int, bits: int) -> int:
    """How far a counter moved from ``prev`` to ``cur``.

    A decrease of a 32-bit counter is a wrap-around (``cur + 2**32 - prev``); a 64-bit counter
    cannot wrap in practice, so a decrease there means it was reset (interface re-created,
    ``perfquery -R``) and the new value is the traffic since the reset (Prometheus' rule).
    """
    if cur >= prev:
        return cur - prev
    if bits < 64 and prev < 2**bits:
        return cur + 2**bits - prev
    return cur


def utilization(rx: float, tx: float, capacity: float | None) -> float | None:
    """``max(rx, tx) / capacity``, or ``None`` without a positive capacity."""
    if capacity is None or not capacity > 0:
        return None
    return max(rx, tx) / capacity


def compute_rates(prev: ProbeSample | None, cur: ProbeSample) -> tuple[LinkRate, ...]:
    """Per-link rates between two samples of one probe, sorted by link name.

    ``rate`` readings need only ``cur``; ``counter`` readings need the link in both samples and
    ``cur.timestamp > prev.timestamp`` (otherwise the link is left out: no rate is known yet).
    A counter narrower than 64 bits is also left out (its rate is unknown, so a node-wide
    aggregate leaves the sample out rather than read it as idle) when it reads its maximum, where
    legacy 32-bit InfiniBand counters *saturate* instead of wrapping (the count stopped somewhere
    in the interval), and when a decrease read as a wrap implies more than :data:`WRAP_SLACK`
    times the link's capacity (a reset: the traffic since is unknown).
    """
    dt = None if prev is None else cur.timestamp - prev.timestamp
    out: list[LinkRate] = []
    for link in sorted(cur.links):
        now = cur.links[link]
        if now.kind == "rate":
            rx, tx = float(now.rx), float(now.tx)
        else:
            before = None if prev is None else prev.links.get(link)
            if before is None or before.kind != "counter" or dt is None or not dt > 0:
                continue
            rx = _counter_rate(int(before.rx), int(now.rx), now, dt)
            tx = _counter_rate(int(before.tx), int(now.tx), now, dt)
            if rx is None or tx is None:
                continue
        cap = now.capacity_bytes_per_s
        out.append(LinkRate(link, rx, tx, utilization(rx, tx, cap), cap))
    return tuple(out)


def _counter_rate(prev: int, cur: int, reading: LinkReading, dt: float) -> float | None:
    """Bytes/s of one direction of a counter between two readings ``dt`` seconds apart, or
    ``None`` when it is unknown (see :func:`compute_rates`)."""
    bits = reading.bits
    if bits < 64 and cur >= 2**bits - 1:  # saturated (or exactly at the top: one sample lost)
        return None
    rate = counter_delta(prev, cur, bits) * reading.unit_bytes / dt
    cap = reading.capacity_bytes_per_s
    if cur < prev and bits < 64 and cap is not None and cap > 0 and rate > WRAP_SLACK * cap:
        return None  # a "wrap" faster than the link: the counter was reset
    return rate
