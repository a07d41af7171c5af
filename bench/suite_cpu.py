"""Where the test suite's time goes: CPU seconds by kind of process, and the floor they set.

Runs a command (default: the README's test command, ``make test``) while sampling every process
of the machine twice a second from ``/proc`` (Linux only), and prints:

* the wall time, the machine's busy CPU seconds over the run (from ``/proc/stat``, so nothing
  short-lived is missed) and the **floor**: busy CPU seconds / cores, the least wall time the
  same work could take on this machine however well it were spread over its cores;
* CPU seconds by kind of process (pytest workers, Ray's worker processes, raylets and agents,
  ``deepshare`` subprocesses...), counted from when each process was first seen (a process
  living less than one sample interval is in the busy total only).

Why: a parallel run cannot beat the floor, so halving the suite's time on a machine needs halving
its work, not only spreading it; this says which work.

``--json`` writes these figures as a benchmark's report (:class:`record.Record`: date, commit and
machine, written whole), which ``make results`` renders.

Usage: python bench/suite_cpu.py [--json runs/bench/suite_cpu.json] [-- COMMAND ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections import Counter

from record import Record, add_json_flag

KINDS = (
    ("default_worker.py", "Ray worker process"), ("ray::", "Ray worker process"),
    ("gcs_server", "Ray GCS"), ("/raylet", "Ray raylet"), ("dashboard/agent.py", "Ray dashboard agent"),
    ("runtime_env/agent", "Ray runtime-env agent"), ("log_monitor", "Ray log monitor"),
    ("autoscaler/_private/monitor.py", "Ray monitor"), ("dashboard/dashboard.py", "Ray dashboard"),
    ("-m deepshare serve", "deepshare serve subprocess"), ("-m deepshare", "deepshare CLI subprocess"),
    ("bin/deepshare", "deepshare CLI subprocess"), ("import sys;exec(", "pytest-xdist worker"),
    ("pytest", "pytest"), ("ray start", "ray start"), ("bash", "shell"),
)
"""(command-line fragment, kind), first match wins; anything else is ``other``."""


def kind_of(cmdline: str) -> str:
    for fragment, kind in KINDS:
        if fragment in cmdline:
            return kind
    return "other"


def _busy_s() -> float:
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


class Sampler(threading.Thread):
    """Every process's CPU seconds since it was first seen, by (pid, start time)."""

    def __init__(self, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.stop = interval_s, threading.Event()
        self.first: dict[tuple[str, str], float] = {}
        self.last: dict[tuple[str, str], float] = {}
        self.cmdline: dict[tuple[str, str], str] = {}
        self.tick = os.sysconf("SC_CLK_TCK")
        self.sample(initial=True)

    def sample(self, initial: bool = False) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = open(f"/proc/{pid}/stat").read()
                rest = stat[stat.rindex(")") + 2:].split()
                cpu = (int(rest[11]) + int(rest[12])) / self.tick
                key = (pid, rest[19])
                if key not in self.first:
                    # a process already running when sampling began counts from then, a new one from 0
                    self.first[key] = cpu if initial else 0.0
                    raw = open(f"/proc/{pid}/cmdline", "rb").read()
                    self.cmdline[key] = raw.replace(b"\0", b" ").decode(errors="replace") or f"[{rest[0] if rest else pid}]"
                self.last[key] = cpu
            except (OSError, ValueError, IndexError):  # gone between listing and reading
                continue

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.sample()

    def by_kind(self) -> tuple[Counter, Counter, Counter]:
        """CPU seconds and processes by kind, and CPU seconds by command line of the ``other`` kind."""
        seconds, count, other = Counter(), Counter(), Counter()
        for key, last in self.last.items():
            used = last - self.first[key]
            if used > 0:
                kind = kind_of(self.cmdline[key])
                seconds[kind] += used
                count[kind] += 1
                if kind == "other":
                    other[self.cmdline[key][:100]] += used
        return seconds, count, other


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_json_flag(parser)
    parser.add_argument("command", nargs="*", help="the command to measure (after --); default: make test")
    args = parser.parse_args(argv)
    if not os.path.isdir("/proc/self"):
        print("suite_cpu: needs Linux's /proc", file=sys.stderr)
        return 2
    command = args.command or ["make", "test"]
    record = Record("suite_cpu", args.json)  # its provenance is taken now: the load the run met
    cores = os.cpu_count() or 1
    sampler = Sampler()
    busy0, start = _busy_s(), time.monotonic()
    sampler.start()
    rc = subprocess.call(command)
    wall, busy = time.monotonic() - start, _busy_s() - busy0
    sampler.stop.set()
    sampler.join()
    sampler.sample()
    seconds, count, other = sampler.by_kind()
    print(f"command: {' '.join(command)} (exit {rc})")
    print(f"wall {wall:.0f} s; machine busy {busy:.0f} CPU-s on {cores} cores = {busy / wall:.2f} cores on average; "
          f"floor (busy / cores) {busy / cores:.0f} s")
    print(f"{'CPU-s':>8} {'procs':>6}  kind of process")
    for kind, used in seconds.most_common():
        print(f"{used:8.1f} {count[kind]:6d}  {kind}")
    if other:
        print("the most of 'other' (other work on the machine counts too):")
        for cmdline, used in other.most_common(5):
            print(f"{used:8.1f}         {cmdline}")
    record.add("wall time", wall, "s", note=f"{' '.join(command)}, exit {rc}")
    record.add("machine busy", busy, "CPU-s", note=f"{cores} cores")
    record.add("floor (busy CPU-s / cores)", busy / cores, "s")
    for kind, used in seconds.most_common():
        record.add(f"CPU of {kind}", used, "CPU-s", note=f"{count[kind]} processes")
    record.write()
    return rc


if __name__ == "__main__":
    sys.exit(main())
