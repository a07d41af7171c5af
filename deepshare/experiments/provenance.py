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
CODE = (PACKAGE, "bench", "rllib_configs", "serve")
"""The checkout's folders a run may read code or configuration from: the package, the benchmarks
(which import each other), the training configs and the service config some of them read. A file
git does not track there makes the checkout dirty."""


def commit(source: Path = SOURCE, outputs: Sequence[str | Path] = ()) -> dict[str, Any] | None:
    """``{"sha", "dirty"}`` of the git checkout the package runs from, or None when ``source`` is
    not a checkout's root (a regular install whose ``site-packages`` lies inside some other
    checkout would be stamped with that one's commit) or without git. ``dirty``: tracked files
    differ from the commit, or a folder of :data:`CODE` has files git does not track (a new module
    or benchmark the run may import, a new config it may read) and does not ignore, the run's own
    ``outputs`` aside, files or folders (a ``--json`` written under ``bench/`` made its next write
    dirty). Git is
    asked without optional locks: reading the status at every write must not hold ``index.lock``
    against the user's own ``git add``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(source), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        root = Path(git("rev-parse", "--show-toplevel")).resolve()
        if root != Path(source).resolve():
            return None
        sha = git("rev-parse", "HEAD")
        own = [Path(path).resolve() for path in outputs]
        untracked = [line for line in git("ls-files", "--others", "--exclude-standard", "--", *CODE).splitlines()
                     if not _within((root / line).resolve(), own)]
        dirty = bool(git("status", "--porcelain", "--untracked-files=no") or untracked)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": dirty}


def _within(path: Path, outputs: Sequence[Path]) -> bool:
    """Whether ``path`` is one of ``outputs`` or lies in one of them (a folder)."""
    return any(path == out or out in path.parents for out in outputs)


def commit_label(found: dict[str, Any] | None) -> str:
    """A :func:`commit` (or a JSON's stamped one) as a benchmark prints it: the short sha, with
    "(with uncommitted changes)" when dirty; "unknown" for None."""
    if not found:
        return "unknown"
    moved = f"; the checkout was at {str(found['sha_at_write'])[:12]} when written" if found.get("sha_at_write") else ""
    return str(found.get("sha", "?"))[:12] + (f" (with uncommitted changes{moved})" if found.get("dirty") else "")


def commit_at_write(started: dict[str, Any] | None, source: Path = SOURCE,
                    outputs: Sequence[str | Path] = ()) -> dict[str, Any] | None:
    """The commit to record for a run that began at ``started`` (its :func:`commit`), read again
    as its results are written: a checkout that became dirty during the run, or moved to another
    commit (a checkout, a pull), ran code the start's reading does not name, so it is recorded
    dirty, and a moved one also says where it was (``sha_at_write``); one whose commit cannot be
    read again is recorded dirty. A run that began dirty stays dirty. Unchanged: ``started`` as it
    was; a caller that writes again passes back what the last write recorded, so a change once
    seen stays recorded. ``outputs``: the run's own files (:func:`commit`). (A change made and
    undone between two readings goes unseen.)"""
    now = commit(source, outputs)
    if now == started or started is None:
        return started
    settled = {**started, "dirty": True}
    if now is not None and now.get("sha") != started.get("sha"):
        settled["sha_at_write"] = now.get("sha")
    return settled


def provenance_at_write(provenance: dict[str, Any], source: Path = SOURCE,
                        outputs: Sequence[str | Path] = ()) -> dict[str, Any]:
    """``provenance`` (a :func:`run_provenance` taken at the start, or the last write's) with its
    commit read again as the results are written (:func:`commit_at_write`); the date, machine and
    load stay the start's."""
    return {**provenance, "commit": commit_at_write(provenance.get("commit"), source, outputs)}


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
