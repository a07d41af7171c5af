"""CPU seconds spent by the processes of a Ray Serve benchmark, by role (Linux ``/proc`` only).

A ratio of requests per second says *that* the service is slower than a trivial Serve app; the
CPU each process spends per request says *where*: the HTTP proxy, the replica (Serve's own
per-request work plus the app's), the load-generating client. On a machine where all of them
share a few cores, every CPU millisecond any of them spends per request lowers throughput.

Processes are matched by their command line (Ray names its workers ``ray::ProxyActor``,
``ray::ServeReplica:APP:DEPLOYMENT``...); the client is this process. Elsewhere than Linux,
:func:`cpu_seconds` returns ``None`` and the benchmark prints no breakdown.
"""

from __future__ import annotations

import os

CLIENT = "client (this process)"


def cpu_seconds(roles: dict[str, str]) -> dict[str, float] | None:
    """``{role: user + system CPU seconds}`` summed over the processes whose command line
    contains the role's pattern, plus :data:`CLIENT`; None without ``/proc``."""
    if not os.path.isdir("/proc/self"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    found = dict.fromkeys(roles, 0.0)
    found[CLIENT] = _process_cpu("self", tick) or 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        for role, pattern in roles.items():
            if pattern in command:
                found[role] += _process_cpu(pid, tick) or 0.0
                break
    return found


def _process_cpu(pid: str, tick: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)


def per_request_ms(before: dict[str, float] | None, after: dict[str, float] | None, requests: int) -> dict[str, float]:
    """CPU milliseconds per request of each role between two :func:`cpu_seconds` readings."""
    if before is None or after is None or requests <= 0:
        return {}
    return {role: 1000.0 * (after[role] - before[role]) / requests for role in after}
