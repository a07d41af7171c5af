"""InfiniBand port traffic from sysfs: ``/sys/class/infiniband/DEV/ports/N/...``.

Which counters (checked against the kernel's ``drivers/infiniband/core/sysfs.c``):

- ``counters/port_xmit_data`` and ``counters/port_rcv_data`` count *4-byte words* (octets
  divided by 4), so bytes = value x 4. Since Linux 4.5 the kernel serves these two files from
  the 64-bit PortCountersExtended attribute when the HCA advertises it (every mlx4/mlx5 HCA);
  that table also adds ``counters/unicast_xmit_packets``, which is how this probe recognises
  it. Without it the files are the legacy 32-bit PortCounters.
- Mellanox OFED's own drivers also publish ``counters_ext/port_xmit_data_64`` and
  ``counters_ext/port_rcv_data_64`` (same 4-byte words, 64 bits); they are preferred when
  present.
- 32-bit counters: a decrease is taken as a wrap at 2**32 (a value above 2**32 - 1 promotes the
  port to 64 bits), unless the wrap would mean more than 1.1 x the port's rate: then it is a
  reset, and the sample has no rate for the port. The IB spec actually lets legacy PortCounters
  *saturate* at 2**32 - 1; a counter at that value gives no rate (unknown, not idle) until
  something resets it. A 64-bit decrease is a reset (see
  :func:`~deepshare.agents.samples.compute_rates`).

Capacity comes from ``ports/N/rate`` (``"40 Gb/sec (4X QDR)"`` -> 40 Gb/s, the signalling
rate the topology specs also use), else the ``capacity_gbps`` / ``fallback_gbps`` parameters.
Links are named ``ib/DEV/PORT`` (backslashes doubled, characters that are not printable escaped).

Every port with readable counters is kept, whatever its ``state``, but sampled only once its
``state`` has read ACTIVE (re-read each sample until then; a port without a ``state`` file counts
as ACTIVE while its directory is there, not once its HCA is gone): a port still down would add its
capacity to the node's ``nic`` and make it look less loaded than it is. The subnet manager
brings ports up seconds after boot, when the agents are often already running, and a port
skipped at start was never sampled. Until some port has read ACTIVE the probe is
:attr:`~InfinibandProbe.waiting` (its status says ``no port ACTIVE yet`` and the ports' states)
and the node's ``nic`` is made of its Ethernet ports; from the first ACTIVE port on, ``nic`` is
the InfiniBand ports for good (see :class:`~deepshare.agents.sampler.Sampler`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from deepshare.agents.probes.base import Clock, Probe, ProbeError, Reader, link_name, read_text
from deepshare.agents.samples import LinkReading, ProbeSample

log = logging.getLogger(__name__)

IB_WORD_BYTES = 4
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def parse_rate_gbps(text: str) -> float | None:
    """``"40 Gb/sec (4X QDR)"`` -> 40.0; ``None`` when the text is not a rate."""
    match = _RATE.match(text)
    return float(match.group(1)) if match else None


@dataclass(frozen=True)
class _Port:
    link: str
    xmit: Path
    rcv: Path
    bits: int
    capacity: float | None
    state: Path


class InfinibandProbe(Probe):
    """Per-port rx/tx bytes/s and utilisation of every active InfiniBand (or RoCE) port (see the
    module docstring for ports that come up late)."""

    name = "infiniband"

    def __init__(
        self,
        sys_root: str | Path = "/sys",
        capacity_gbps: float | None = None,
        fallback_gbps: float | None = None,
        clock: Clock = time.monotonic,
        reader: Reader = read_text,
    ) -> None:
        super().__init__(clock)
        self._reader = reader
        self._ports: list[_Port] = []
        self._active: set[str] = set()  # ports whose state has read ACTIVE: the ones sampled
        self._states: dict[str, str] = {}  # what a port not yet ACTIVE last read as its state
        self._failing: set[str] = set()  # ports whose last read failed (logged once each time)
        self._wide: set[str] = set()
        root = Path(sys_root) / "class" / "infiniband"
        try:
            if not root.is_dir():
                self._unavailable(f"no InfiniBand devices ({root} does not exist)")
                return
            port_dirs = sorted(root.glob("*/ports/*"))
        except OSError as exc:
            self._unavailable(f"cannot read {root}: {exc}")
            return
        problems: list[str] = []
        for port_dir in port_dirs:
            try:
                port = self._port(port_dir, capacity_gbps, fallback_gbps)
            except (OSError, ValueError) as exc:
                problems.append(f"{port_dir}: {exc}")
                continue
            if port is not None:
                self._ports.append(port)
        if not self._ports:
            why = "; ".join(problems) if problems else f"no port under {root}"
            self._unavailable(f"no readable InfiniBand port counters ({why})")
        self._activate()

    def _port(self, port_dir: Path, capacity_gbps: float | None, fallback_gbps: float | None) -> _Port | None:
        link = link_name("ib", port_dir.parent.parent.name, port_dir.name)
        if link is None:
            return None
        ext = port_dir / "counters_ext"
        if (ext / "port_xmit_data_64").exists() and (ext / "port_rcv_data_64").exists():
            xmit, rcv, bits = ext / "port_xmit_data_64", ext / "port_rcv_data_64", 64
        else:
            counters = port_dir / "counters"
            xmit, rcv = counters / "port_xmit_data", counters / "port_rcv_data"
            bits = 64 if (counters / "unicast_xmit_packets").exists() else 32
        int(self._reader(xmit)), int(self._reader(rcv))  # readable and numeric, or raise now
        gbps = capacity_gbps
        if gbps is None:
            try:
                gbps = parse_rate_gbps(self._reader(port_dir / "rate"))
            except OSError:
                gbps = None
        if gbps is None:
            gbps = fallback_gbps
        capacity = None if gbps is None else gbps * 1e9 / 8
        return _Port(link, xmit, rcv, bits, capacity, port_dir / "state")

    def _activate(self) -> None:
        """Mark the ports whose ``state`` reads ACTIVE now (or that have no ``state`` file in a
        port directory that is still there) as sampled; a port stays sampled once it was. An
        unreadable state, or a port directory gone (its HCA removed: sampling it would fail
        every sample), leaves the port for the next try."""
        for port in self._ports:
            if port.link in self._active:
                continue
            try:
                if port.state.exists():
                    state = self._reader(port.state).strip()
                elif port.state.parent.is_dir():
                    state = "ACTIVE"  # a driver that publishes no state
                else:
                    self._states[port.link] = "gone"
                    continue
            except OSError as exc:
                self._states[port.link] = f"state unreadable ({exc.strerror or exc})"
                continue
            if "ACTIVE" in state:
                self._active.add(port.link)
                self._states.pop(port.link, None)
            else:
                self._states[port.link] = state

    @property
    def waiting(self) -> str:
        """``no port ACTIVE yet`` and each port's last state while no port has read ACTIVE."""
        if not self._ports or self._active:
            return ""
        states = ", ".join(f"{p.link} {self._states.get(p.link, '?')}" for p in self._ports)
        return f"no port ACTIVE yet ({states})"

    @property
    def links(self) -> tuple[str, ...]:
        """The ports sampled now: those whose state has read ACTIVE."""
        return tuple(p.link for p in self._ports if p.link in self._active)

    def _read(self) -> ProbeSample:
        """Read every active port's counters. A port whose read fails is left out of this sample
        (the sampler then leaves ``nic`` out of it too) and retried next time: a hot-removed HCA
        or VF made every later sample fail, costing the other ports their rates and the node its
        ``nic`` for good. Raises only when every active port fails."""
        if len(self._active) < len(self._ports):
            self._activate()
        now = self.clock()
        links: dict[str, LinkReading] = {}
        problems: list[str] = []
        for port in self._ports:
            if port.link not in self._active:
                continue
            reading = self._reading(port)
            if isinstance(reading, str):
                problems.append(reading)
            else:
                links[port.link] = reading
        if problems and not links:
            raise ProbeError(problems[0])
        return ProbeSample(now, links)

    def _reading(self, port: _Port) -> LinkReading | str:
        """One port's counters, or why they could not be read (logged when it starts failing
        and when it reads again)."""
        try:
            tx = int(self._reader(port.xmit))
            rx = int(self._reader(port.rcv))
        except (OSError, ValueError) as exc:
            problem = f"{port.link}: cannot read counters: {exc}"
            if port.link not in self._failing:
                self._failing.add(port.link)
                log.warning("infiniband probe: %s; the port is left out until it reads again", problem)
            return problem
        if port.link in self._failing:
            self._failing.discard(port.link)
            log.info("infiniband probe: %s reads again", port.link)
        if max(rx, tx) >= 2**32:
            self._wide.add(port.link)
        bits = 64 if port.link in self._wide else port.bits
        return LinkReading(rx, tx, bits=bits, unit_bytes=IB_WORD_BYTES, capacity_bytes_per_s=port.capacity)
