"""The files one command writes, put in place together: one run's outputs, never a mix of runs.

Each output is first written whole to a temporary file beside its target (as
:func:`~deepshare.core.atomic.write_bytes_atomic` does, or streamed by a
:class:`~deepshare.core.jobs_csv.JobsCsvStream`); :meth:`OutputSet.commit` renames them over
their targets only once every one is ready. A failure before that (an exception while building
the report, a JSON that cannot be written, a full disk, Ctrl-C) removes every temporary file and
leaves each target as it was: a reader never finds a new file beside an old one from an earlier
run and takes them for one run's outputs. A rename that fails during the commit itself (rare:
the targets were checked before the work) puts back the targets already renamed, from hard
links to the old files made just before (where the file system has hard links; a target that
did not exist is removed again).

Two renames cannot be one atomic step: a process killed outright (SIGKILL, a power cut) between
them leaves the targets already renamed new and the rest old, with its temporary files and
backups beside them. ``export-policy``'s card names its weights' SHA-256, so that mix is found by
the card check (``deepshare policies --card``); and the next commit of an output set with the
same targets removes the hidden files such a kill left (:func:`sweep_stale`): backups of its own
naming a minute old, temporary files an hour old (a younger one may be another run's, still
being written; an older one a live stream holds, :func:`hold_temp`, is left too), each aged
from the later of its modification and status change: a backup is a hard link, whose
modification time is its target's last write, while making the link changes its status. The sweep runs before the renames, with the work it may throw away: Ctrl-C during it
removes every temporary file of the set and leaves every target as it was, and a file it cannot
read or remove is left, never failing the commit.

Use as::

    with OutputSet() as outputs:
        outputs.add_bytes(path, data, "figure")
        stream = outputs.add_stream(JobsCsvStream(csv_path))
        ...                      # the run, writing to the stream
        outputs.commit()         # leaving the block without it discards everything
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import Callable, Collection, Iterable, Protocol, TypeVar

from deepshare.core.atomic import stage_bytes, temp_prefix
from deepshare.core.errors import DeepShareError


class Staged(Protocol):
    """An output being written to a temporary file beside ``target``."""

    target: Path

    def finish(self) -> Path:
        """Complete the temporary file (closed, flushed to disk) and return its path."""

    def discard(self) -> None:
        """Remove the temporary file; the target is left as it was."""


S = TypeVar("S", bound=Staged)


class _Written:
    """A temporary file beside ``target``, already written whole."""

    def __init__(self, target: Path, tmp: Path) -> None:
        self.target = target
        self.tmp = tmp

    def finish(self) -> Path:
        return self.tmp

    def discard(self) -> None:
        _unlink(self.tmp)


class OutputSet:
    """Outputs staged as temporary files and renamed into place together (see the module doc)."""

    def __init__(self) -> None:
        self._staged: list[tuple[Staged, str]] = []
        self._after: list[Callable[[], None]] = []
        self._done = False

    def add_bytes(self, path: str | os.PathLike[str], data: bytes, what: str = "file", first: bool = False) -> Path:
        """Write ``data`` for ``path`` to a temporary file now; it replaces ``path`` at :meth:`commit`
        (renamed before the outputs added earlier with ``first``: a file that describes the others,
        as a policy card its weights, so that a kill between the renames leaves the description
        new and the files it describes old, which its check finds). Returns ``path``."""
        self._check_open()
        target = Path(path)
        entry = (_Written(target, stage_bytes(target, data, what)), what)
        self._staged.insert(0 if first else len(self._staged), entry)
        return target

    def add_text(self, path: str | os.PathLike[str], text: str, what: str = "file", first: bool = False) -> Path:
        """:meth:`add_bytes` of ``text`` in UTF-8."""
        return self.add_bytes(path, text.encode("utf-8"), what, first)

    def add_written(self, tmp: str | os.PathLike[str], path: str | os.PathLike[str], what: str = "file") -> None:
        """A temporary file the caller made beside ``path`` (in its folder, so the rename is atomic) and
        writes itself (to check it before it counts: ``export-policy`` loads it back): it replaces
        ``path`` at :meth:`commit` and is removed with the rest on any failure, from now on."""
        self._check_open()
        self._staged.append((_Written(Path(path), Path(tmp)), what))

    def add_stream(self, stream: S, what: str = "file") -> S:
        """An output written while the command runs (a :class:`~deepshare.core.jobs_csv.JobsCsvStream`):
        finished and renamed at :meth:`commit`, discarded with the rest."""
        self._check_open()
        self._staged.append((stream, what))
        return stream

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the files are in place (a "wrote PATH" line, the JSON for ``--json -``):
        nothing is announced or printed for a run whose files were discarded."""
        self._check_open()
        self._after.append(action)

    def commit(self) -> list[Path]:
        """Finish every output and rename each over its target; then run the :meth:`after_commit`
        actions. On any failure (Ctrl-C included) every temporary file is removed and every target
        is as it was before. Returns the targets, in the order they were renamed."""
        self._check_open()
        self._done = True
        try:
            ready = [(staged.finish(), staged.target, what) for staged, what in self._staged]
            try:  # leftovers of a killed write; inside the try: Ctrl-C here discards the set
                sweep_stale([target for _, target, _ in ready], keep={tmp for tmp, _, _ in ready})
            except OSError:
                pass  # a leftover that cannot be swept is left; the outputs are still put in place
        except BaseException:
            self._discard_all()
            raise
        _rename_all(ready)
        for action in self._after:
            action()
        return [target for _, target, _ in ready]

    def discard(self) -> None:
        """Remove every temporary file (the targets are left as they were); nothing is committed."""
        if not self._done:
            self._done = True
            self._discard_all()

    def _discard_all(self) -> None:
        for staged, _ in self._staged:
            staged.discard()

    def _check_open(self) -> None:
        if self._done:
            raise DeepShareError("these outputs were already committed or discarded")

    def __enter__(self) -> "OutputSet":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.discard()  # after commit() a no-op; without it (an exception, or a return) nothing is written


def _rename_all(ready: list[tuple[Path, Path, str]]) -> None:
    """Rename each temporary file over its target; on a failure put back what was renamed."""
    before: list[tuple[bool, Path | None]] = []
    started = 0
    try:
        for _, target, _ in ready:
            before.append((os.path.lexists(target), _backup(target)))
        for tmp, target, _ in ready:
            started += 1  # counted first: putting back a target not yet replaced changes nothing
            os.replace(tmp, target)
    except BaseException as exc:
        for (_, target, _), (existed, backup) in zip(ready[:started], before):
            _restore(target, existed, backup)
        for tmp, _, _ in ready[max(started - 1, 0):]:
            _unlink(tmp)
        if isinstance(exc, OSError):
            _, target, what = ready[started - 1]
            raise DeepShareError(f"{target}: cannot write {what}: {exc.strerror or exc}") from None
        raise
    finally:
        for _, backup in before:
            if backup is not None:
                _unlink(backup)


STALE_BACKUP_S = 60.0
"""A backup (``.NAME.<hex>.old``) lives only while a commit renames; one this old was left by a
kill. Its age counts from its making (its status change: a hard link keeps its target's
modification time, however old)."""
STALE_TEMP_S = 3600.0
"""A temporary file (``.NAME.<random>.tmp``) this old was left by a kill (as the checkpoint's,
:data:`deepshare.runtime.job.STALE_TEMP_S`); a younger one may be another run's, still being written."""


def hold_temp(fd: int) -> None:
    """Mark a temporary file as being written, for as long as ``fd`` stays open: an exclusive
    ``flock`` that :func:`sweep_stale` tests before it removes a ``.tmp``. A stream that buffers
    rows for hours (``simulate --jobs-csv``) leaves its file's times at its making, so its age
    alone cannot tell it from a killed run's leftover. Nothing where ``flock`` is missing."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):
        pass


def _held_by_a_writer(path: Path) -> bool:
    """Whether a live writer holds ``path`` (:func:`hold_temp`). Opened for writing where it can
    be (on NFS an exclusive ``flock`` needs it), never truncated; a file that cannot be opened
    (a link put in its place) is treated as held and left; a lock that fails for another reason
    than being taken (no lock support) leaves the decision to the file's age, as before locks."""
    try:
        import fcntl
    except ImportError:
        return False
    flags = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        try:
            fd = os.open(path, os.O_RDWR | flags)
        except PermissionError:  # a finished file with the target's mode (no owner write)
            fd = os.open(path, os.O_RDONLY | flags)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False  # released on close, below: the writer is gone
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep_stale(targets: Iterable[Path], keep: Collection[Path] = (), now: float | None = None) -> list[Path]:
    """Remove the hidden files a process killed during an earlier write of ``targets`` left beside
    them: only names of this module's own making for exactly those targets (``.NAME.`` then
    mkstemp's 8 random characters and ``.tmp``, or 12 hex digits and ``.old``; a target name
    longer than :func:`temp_prefix` keeps is skipped, its prefix being shared), only this user's
    regular files, and only stale ones (:data:`STALE_BACKUP_S`, :data:`STALE_TEMP_S`, from the
    later of a file's modification and status change); never a file in ``keep`` (the same file,
    however its path is spelt: relative or absolute). Returns what was removed; a file that cannot
    be removed is left."""
    now = time.time() if now is None else now
    kept = set()
    for path in keep:
        try:
            info = os.lstat(path)
            kept.add((info.st_dev, info.st_ino))
        except OSError:
            pass
    removed = []
    for target in targets:
        prefix = temp_prefix(target)
        if prefix != f".{target.name}.":  # the name was cut: the prefix may be another target's too
            continue
        pattern = re.compile(re.escape(prefix) + r"(?:(?P<tmp>[a-z0-9_]{8})\.tmp|(?P<old>[0-9a-f]{12})\.old)")
        folder = target.parent if str(target.parent) else Path(".")
        try:
            names = [entry.name for entry in os.scandir(folder) if entry.name.startswith(prefix)]
        except OSError:
            continue
        for name in names:
            found = pattern.fullmatch(name)
            path = folder / name
            if not found:
                continue
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or (info.st_dev, info.st_ino) in kept:
                    continue
                # a backup is a hard link: its mtime is the target's last write; linking sets its ctime
                age = now - max(info.st_mtime, info.st_ctime)
                if age >= (STALE_BACKUP_S if found["old"] else STALE_TEMP_S):
                    if found["tmp"] and _held_by_a_writer(path):
                        continue  # a live stream's, however old its times: see hold_temp
                    os.unlink(path)
                    removed.append(path)
            except OSError:
                pass
    return removed


def _backup(target: Path) -> Path | None:
    """A hard link to the file now at ``target`` (to put back if the commit fails), or None when
    there is none (a new output) or the file system cannot link."""
    folder = target.parent if str(target.parent) else Path(".")
    for _ in range(100):
        backup = folder / f"{temp_prefix(target)}{secrets.token_hex(6)}.old"
        try:
            os.link(target, backup, follow_symlinks=False)
            return backup
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def _restore(target: Path, existed: bool, backup: Path | None) -> None:
    """Put the old file back at ``target`` from its backup, or remove a new output (there was no
    file before); an old file that could not be linked is lost to the new one (nothing to put back)."""
    try:
        if backup is not None:
            os.replace(backup, target)
        elif not existed:
            os.unlink(target)
    except OSError:
        pass


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
