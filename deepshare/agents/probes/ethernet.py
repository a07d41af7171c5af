"""Ethernet (and any netdev) traffic from ``/proc/net/dev``, link speed from sysfs.

``/proc/net/dev`` lists, per interface, 8 receive then 8 transmit columns; the first of each is
bytes. The kernel keeps them as ``unsigned long``: 64-bit on 64-bit kernels (a decrease is a
reset), 32-bit on 32-bit kernels (a decrease is a wrap); ``counter_bits`` defaults to the
running interpreter's word size and tests set it. Since Linux 2.6.36 the file prints 64-bit
stats on every kernel, so an interface whose counter reads above 2**32 - 1 is read as 64-bit
from then on: on a 32-bit userland such a value was taken as a saturated 32-bit counter, and
an interface that had carried 4 GiB never had a rate again. Speed is ``/sys/class/net/IF/speed`` in Mb/s,
which reads ``-1`` or fails with EINVAL for virtual or down links: capacity is then the
``capacity_gbps`` parameter (for that interface or all), else ``fallback_gbps`` (the node's
``nic_gbps`` from the topology spec), else unknown.

By default ``lo`` is skipped, and so are virtual interfaces (no ``/sys/class/net/IF/device``:
bridges, veth, ifb, docker0) whenever sysfs is readable, since they re-count traffic that
already crossed a physical NIC. An absent or unreadable sysfs never fails the probe: every
interface is kept and capacities come from the parameters. An unreadable ``/proc/net/dev``
makes the probe unavailable with the OS's reason.

With the default reader, ``/proc/net/dev`` stays open between samples (read with ``pread`` from
offset 0, reopened after a failed read) and interface speeds are read once, at construction.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Mapping

from deepshare.agents.probes.base import Clock, Probe, ProbeError, Reader, link_name, pread_text, read_text
from deepshare.agents.samples import LinkReading, ProbeSample

WORD_BITS = 64 if sys.maxsize > 2**32 else 32


def parse_proc_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``{interface: (rx_bytes, tx_bytes)}`` from the text of ``/proc/net/dev``."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue  # the two header lines
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) < 9:
            raise ProbeError(f"/proc/net/dev: interface {name.strip()!r} has {len(fields)} columns, expected 16")
        try:
            out[name.strip()] = (int(fields[0]), int(fields[8]))
        except ValueError:
            raise ProbeError(f"/proc/net/dev: interface {name.strip()!r}: non-numeric byte counters") from None
    return out


class EthernetProbe(Probe):
    """Per-interface rx/tx bytes/s and utilisation; links are named ``eth/IFACE`` (backslashes
    doubled and characters that are not printable escaped, :func:`~deepshare.agents.probes.base.link_name`)."""

    name = "ethernet"

    def __init__(
        self,
        proc_root: str | Path = "/proc",
        sys_root: str | Path = "/sys",
        interfaces: tuple[str, ...] | None = None,
        include_loopback: bool = False,
        include_virtual: bool = False,
        capacity_gbps: float | Mapping[str, float] | None = None,
        fallback_gbps: float | None = None,
        counter_bits: int = WORD_BITS,
        clock: Clock = time.monotonic,
        reader: Reader = read_text,
    ) -> None:
        super().__init__(clock)
        self._dev = Path(proc_root) / "net" / "dev"
        self._net = Path(sys_root) / "class" / "net"
        self._reader = reader
        self._keep_open = reader is read_text  # an injected reader is called every time
        self._fd: int | None = None
        self._bits = counter_bits
        self._wide: set[str] = set()  # interfaces seen above 2**32 - 1: read as 64-bit
        self._capacity_gbps = capacity_gbps
        self._fallback_gbps = fallback_gbps
        self.interfaces: tuple[str, ...] = ()
        self._links: dict[str, str] = {}  # interface -> link name (unprintable characters escaped)
        self._capacity: dict[str, float | None] = {}
        try:
            counters = parse_proc_net_dev(reader(self._dev))
        except (OSError, ProbeError) as exc:
            self._unavailable(f"cannot read {self._dev}: {exc}")
            return
        if interfaces is not None:
            missing = sorted(set(interfaces) - set(counters))
            if missing:
                self._unavailable(f"{self._dev} lists no interface {', '.join(missing)}")
                return
            chosen = list(interfaces)
        else:
            chosen = [i for i in counters if include_loopback or i != "lo"]
            if not include_virtual:
                chosen = self._physical(chosen)
        self._links = {i: name for i in chosen if (name := link_name("eth", i)) is not None}
        chosen = list(self._links)
        if not chosen:
            self._unavailable(f"{self._dev} lists no physical interface besides lo")
            return
        self.interfaces = tuple(sorted(chosen))
        self._capacity = {i: self._detect_capacity(i) for i in self.interfaces}

    def _physical(self, interfaces: list[str]) -> list[str]:
        """``interfaces`` without virtual ones, when sysfs can tell; all of them when it cannot
        (absent or unreadable ``/sys/class/net``: a container, a locked-down host)."""
        try:
            if not self._net.is_dir():
                return interfaces
            return [i for i in interfaces if i == "lo" or (self._net / i / "device").exists()]
        except OSError:
            return interfaces

    def _detect_capacity(self, iface: str) -> float | None:
        """Bytes/s: the parameter, else sysfs speed (Mb/s), else the fallback, else None."""
        given = self._capacity_gbps
        if isinstance(given, Mapping):
            given = given.get(iface)
        if given is not None:
            return given * 1e9 / 8
        try:
            mbps = int(self._reader(self._net / iface / "speed").strip())
        except (OSError, ValueError):
            mbps = -1
        if mbps > 0:
            return mbps * 1e6 / 8
        return None if self._fallback_gbps is None else self._fallback_gbps * 1e9 / 8

    def _read_dev(self) -> str:
        if not self._keep_open:
            return self._reader(self._dev)
        if self._fd is None:
            self._fd = os.open(self._dev, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return pread_text(self._fd)
        except OSError:
            self.close()  # reopen next time
            raise

    def _read(self) -> ProbeSample:
        try:
            text = self._read_dev()
        except OSError as exc:
            raise ProbeError(f"cannot read {self._dev}: {exc}") from exc
        now = self.clock()
        counters = parse_proc_net_dev(text)
        links = {}
        for iface in self.interfaces:
            if iface in counters:  # an interface that disappeared is simply not reported
                rx, tx = counters[iface]
                if max(rx, tx) >= 2**32:
                    self._wide.add(iface)
                bits = 64 if iface in self._wide else self._bits
                links[self._links[iface]] = LinkReading(rx, tx, bits=bits, capacity_bytes_per_s=self._capacity[iface])
        return ProbeSample(now, links)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
