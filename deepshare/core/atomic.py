"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

The target must be a new path or a regular file (:func:`~deepshare.core.files.check_output_path`):
the rename would otherwise replace a device (``/dev/null``), a FIFO or a socket with a regular file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from deepshare.core.errors import DeepShareError
from deepshare.core.files import check_output_path


def mode_for(target: Path) -> int:
    """The mode of a file written at ``target``: the replaced file's permission bits when it is a
    regular file of this user (never its setuid, setgid or sticky bits), else what ``open()``
    would give a new file under the umask. A symlink's target or a file someone else planted is
    not a mode to take: its owner could make the output setuid or writable by anyone."""
    try:
        info = os.lstat(target)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
            return info.st_mode & 0o777
    except OSError:
        pass
    return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux's
    ``/proc/self/status``): setting it to 0 and back, the only other way, would give a file
    another thread creates meanwhile mode 0666."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o077)  # the fallback: briefly the strictest common umask, never 0
    os.umask(umask)
    return umask


def temp_prefix(target: Path) -> str:
    """The temporary file's name prefix: the target's name, cut so that a target name of the
    system's maximum length still leaves room for the random part and the suffix."""
    return f".{target.name[:50]}."


def write_text_atomic(path: str | os.PathLike[str], text: str, what: str = "file", *, sync: bool = True) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    return write_bytes_atomic(path, text.encode("utf-8"), what, sync=sync)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, what: str = "file", *, sync: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    An existing ``path`` that is not a regular file (device, FIFO, socket, directory) is refused,
    and every path error is one :class:`DeepShareError` line naming the path. ``sync=False`` skips
    the ``fsync``: a reader still never sees half a file, but a crash may lose the new one (for
    outputs rewritten often whose loss is harmless, such as a progress report).
    """
    return write_atomic_with(path, lambda fh: fh.write(data), what, sync=sync)


def write_atomic_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], what: str = "file", *,
                      sync: bool = True) -> Path:
    """:func:`write_bytes_atomic` for output made by ``write(fh)`` straight into the temporary
    file, with no copy of it in memory (a large checkpoint). ``fh`` is open for reading too, so
    ``write`` can check what it wrote; whatever it raises leaves no temporary file and the old
    ``path`` as it was."""
    target = Path(path)
    tmp = stage_with(target, write, what, sync=sync)
    try:
        os.replace(tmp, target)
    except BaseException as exc:
        _unlink(tmp)
        if isinstance(exc, OSError):
            raise DeepShareError(f"{target}: cannot write {what}: {exc.strerror or exc}") from None
        raise
    return target


def stage_bytes(path: str | os.PathLike[str], data: bytes, what: str = "file", *, sync: bool = True) -> Path:
    """Write ``data`` to a new temporary file beside ``path``, ready to be renamed over it (flushed
    to disk, given the target's mode), and return the temporary file's path: the first half of an
    atomic write, for outputs put in place together (:mod:`deepshare.core.output_set`). The caller
    renames or removes it; a failure here leaves no temporary file. ``path`` is checked as
    :func:`write_bytes_atomic` checks it."""
    return stage_with(path, lambda fh: fh.write(data), what, sync=sync)


def stage_with(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], what: str = "file", *,
               sync: bool = True) -> Path:
    """:func:`stage_bytes` for a temporary file filled by ``write(fh)`` (open for reading too)."""
    target = Path(path)
    check_output_path(target, what)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(target), suffix=".tmp")
    except OSError as exc:
        raise DeepShareError(f"{target}: cannot write {what}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w+b") as fh:
            write(fh)
            fh.flush()
            # mkstemp makes 0600; give the file a normal mode, through the descriptor: by its name,
            # a link put in its place meanwhile would pass the mode on to the link's target
            os.fchmod(fh.fileno(), mode_for(target))
            if sync:
                os.fsync(fh.fileno())
    except BaseException as exc:
        _unlink(Path(tmp))
        if isinstance(exc, OSError):
            raise DeepShareError(f"{target}: cannot write {what}: {exc.strerror or exc}") from None
        raise
    return Path(tmp)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
