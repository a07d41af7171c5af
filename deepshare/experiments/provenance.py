"""Where and when a measurement was made: stamped into the JSON of ``deepshare evaluate --suite``
and of the benchmarks, and printed on the results page generated from them
(:mod:`deepshare.experiments.results_page`), so a figure always says which run it came from."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

SOURCE = Path(__file__).resolve().parents[2]
"""The folder holding the ``deepshare`` package: a git checkout's root for an editable install
(``site-packages`` for a regular one)."""
PACKAGE = Path(__file__).resolve().parents[1].name
"""The package's folder in that checkout (``deepshare``)."""


def commit(source: Path = SOURCE) -> dict[str, Any] | None:
    """``{"sha", "dirty"}`` of the git checkout the package runs from, or None when ``source`` is
    not a checkout's root (a regular install whose ``site-packages`` lies inside some other
    checkout would be stamped with that one's commit) or without git. ``dirty``: tracked files
    differ from the commit, or the package has files git does not track (a new module the run
    may import) and does not ignore."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != Path(source).resolve():
            return None
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no")
                     or git("ls-files", "--others", "--exclude-standard", "--", PACKAGE))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": dirty}


def commit_label(found: dict[str, Any] | None) -> str:
    """A :func:`commit` (or a JSON's stamped one) as a benchmark prints it: the short sha, with
    "(with uncommitted changes)" when dirty; "unknown" for None."""
    if not found:
        return "unknown"
    return str(found.get("sha", "?"))[:12] + (" (with uncommitted changes)" if found.get("dirty") else "")


def machine() -> dict[str, Any]:
    """The machine in a few words: OS, architecture, CPU model and count, memory, Python, load."""
    cpu = platform.processor() or platform.machine()
    memory_gib = None
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
        with open("/proc/meminfo") as fh:
            kib = next((int(line.split()[1]) for line in fh if line.startswith("MemTotal:")), None)
            memory_gib = round(kib / 2**20, 1) if kib else None
    except OSError:  # not Linux
        pass
    return {
        "system": f"{platform.system()} {platform.release()}", "arch": platform.machine(), "cpu": cpu,
        "cpus": os.cpu_count(), "memory_gib": memory_gib, "python": platform.python_version(),
        "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def run_provenance(command: Sequence[str] | None = None) -> dict[str, Any]:
    """``{"date", "deepshare", "commit", "machine", "command"}`` for a run starting now."""
    from deepshare import __version__

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "deepshare": __version__,
        "commit": commit(),
        "machine": machine(),
        "command": list(command) if command is not None else None,
    }
