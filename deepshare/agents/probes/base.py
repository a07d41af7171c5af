"""The probe contract shared by the NVML, InfiniBand, Ethernet and simulated probes.

A probe is a plain class (no Ray): its constructor detects whether the source exists and sets
``available`` / ``reason``, never raising for a missing GPU, HCA or permission; ``sample()``
reads the source once. Filesystem roots, the clock and the file reader are constructor
parameters so tests run on fixture trees with exact timestamps.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable

from deepshare.agents.report import MAX_NAME_CHARS
from deepshare.agents.samples import LinkRate, ProbeSample, compute_rates

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Reader = Callable[[Path], str]


class ProbeError(Exception):
    """A probe could not be read (unavailable, or a read failed mid-run)."""


def link_name(*parts: str) -> str | None:
    """The link ``parts`` name (``("eth", "eno1")`` -> ``eth/eno1``), every character that is not
    printable escaped as Python writes it and every backslash doubled; ``None`` (logged) when that
    is longer than a report allows. Linux lets an interface's name hold control characters, and
    the monitor refuses a report with an unprintable link name whole: one such interface cost the
    node every report, for good. Doubling every backslash, not only in names with something
    escaped, keeps two names apart: ``lan`` + ESC is ``eth/lan\\x1b`` and the name ``lan\\x1b``
    (backslash, x, 1, b: Linux allows a backslash) is ``eth/lan\\\\x1b``; both were ``eth/lan\\x1b``,
    and one interface's readings overwrote the other's. (Neither Linux nor the InfiniBand core
    allows a ``/`` in a name, so the parts stay apart too.)"""
    name = "/".join(_escaped(part) for part in parts)
    if len(name) <= MAX_NAME_CHARS:
        return name
    log.warning("probe: link %s... left out: its name is longer than %d characters", name[:40], MAX_NAME_CHARS)
    return None


def _escaped(part: str) -> str:
    """``part`` with its backslashes doubled and the characters that are not printable escaped
    (``\\x1b``, ``\\n``, ``\\u2028``): one-to-one, and printable."""
    if part.isprintable() and "\\" not in part:
        return part
    return "".join("\\\\" if ch == "\\" else ch if ch.isprintable() else ascii(ch)[1:-1] for ch in part)


def read_text(path: Path) -> str:
    """The default reader: the whole file as text (sysfs and procfs files are small).

    Raw ``os.open``/``os.read`` rather than ``open()``: no buffered text wrapper to build, which
    is about a third of a read's cost, and agents read these files every sample.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):  # procfs hands out a page or so per read
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", errors="replace")


def pread_text(fd: int) -> str:
    """The whole file open as ``fd`` as text, read from offset 0 (procfs regenerates it).

    What a probe uses for a file it reads every sample: no path lookup, open or close per read,
    which halves the cost of reading ``/proc/net/dev``.
    """
    chunks, offset = [], 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("ascii", errors="replace")


class Probe:
    """Base class: subclasses set ``name`` and implement :meth:`_read`."""

    name: str = "probe"

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.available = True
        self.reason = ""

    def _unavailable(self, reason: str) -> None:
        self.available = False
        self.reason = reason

    def sample(self) -> ProbeSample:
        """Read every link once; raises :class:`ProbeError` when the probe is unavailable."""
        if not self.available:
            raise ProbeError(f"{self.name}: unavailable: {self.reason}")
        return self._read()

    def _read(self) -> ProbeSample:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def waiting(self) -> str:
        """Why the probe, though available, has nothing to measure yet (an InfiniBand HCA with
        no port ACTIVE); ``""`` once it has. Read after :meth:`sample`: the sampler reports it as
        the probe's status and does not count such a probe as a source of the node's ``nic``."""
        return ""

    def rates(self, prev: ProbeSample | None, cur: ProbeSample) -> tuple[LinkRate, ...]:
        """Per-link rates between two of this probe's samples (see :func:`compute_rates`)."""
        return compute_rates(prev, cur)

    def close(self) -> None:
        """Release what the probe holds (NVML handles); the default holds nothing."""

    def __repr__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        return f"<{type(self).__name__} {self.name} {state}>"


class UnavailableProbe(Probe):
    """Stands in for probes that could not even be built, so the failure shows in reports."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__()
        self.name = name
        self._unavailable(reason)
