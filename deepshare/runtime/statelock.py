"""One scheduler per state folder: an exclusive ``flock`` on ``<state>/scheduler.lock``.

Two schedulers on one journal would each launch the same queued job; the lock makes the second
one fail at start with a clear error. The kernel drops the lock when the holder dies (even by
SIGKILL), so a crashed scheduler never blocks its restart. The file is the user's alone (mode
0600, set on the open file whatever the umask or its old mode; a symlink in its place is refused).
The state folder itself is locked too: the file can be removed under its holder (an operator
cleaning up what looks like a stale lock), and a second scheduler would then lock a new one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import IO

from deepshare.core.errors import DeepShareError
from deepshare.runtime.private import make_private_dirs


LOCK_MODE = 0o600
"""Only the scheduler's user can open the lock file: whoever can open it can ``flock`` it and keep
the scheduler from starting (a 0644 file in a folder others can enter is open to every local user)."""


class StateLock:
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "scheduler.lock"
        self._fh: IO[str] | None = None
        self._folder = -1

    def acquire(self) -> "StateLock":
        try:
            make_private_dirs(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE)
        except OSError as exc:
            raise DeepShareError(f"--state {self.path.parent}: cannot create the lock file ({exc.strerror or exc})") from None
        try:
            os.fchmod(fd, LOCK_MODE)  # the umask filtered os.open's mode; an older lock file may be 0644
            fh = os.fdopen(fd, "r+", encoding="utf-8")
        except OSError as exc:
            os.close(fd)
            raise DeepShareError(f"--state {self.path.parent}: cannot make the lock file private ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if not _held(exc):  # the filesystem cannot lock (ENOLCK on some network mounts): say so
                fh.close()
                raise DeepShareError(f"--state {self.path.parent}: cannot lock {self.path} "
                                     f"({exc.strerror or exc}); use a local folder") from None
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise DeepShareError(
                f"--state {self.path.parent}: another scheduler (pid {holder}) is using this state folder"
            ) from None
        try:
            folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            fh.close()
            raise DeepShareError(f"--state {self.path.parent}: cannot open the state folder ({exc.strerror or exc})") from None
        try:
            _lock_folder(folder)
        except OSError as exc:
            os.close(folder)
            fh.close()
            if not _held(exc):
                raise DeepShareError(f"--state {self.path.parent}: cannot lock the state folder "
                                     f"({exc.strerror or exc}); use a local folder") from None
            raise DeepShareError(f"--state {self.path.parent}: another scheduler is using this state folder "
                                 "(its scheduler.lock was removed while it ran)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh, self._folder = fh, folder
        return self

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
            os.close(self._folder)  # drops the folder's lock


FOLDER_PATIENCE_S = 0.5
"""How long :meth:`StateLock.acquire` keeps trying the folder's lock while it is held: every
client command with ``--state`` takes it shared for a moment (:func:`scheduler_running`), and a
start that met one of those failed at once, saying another scheduler ran. A scheduler holds it
for as long as it runs, so half a second more tells the two apart."""


def _lock_folder(folder: int) -> None:
    """Take the folder's exclusive lock, retrying while it is held for :data:`FOLDER_PATIENCE_S`;
    the last ``OSError`` when it stays held or cannot be taken."""
    deadline = time.monotonic() + FOLDER_PATIENCE_S
    while True:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if not _held(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


def _held(exc: OSError) -> bool:
    """Whether a failed non-blocking ``flock`` failed because another process holds the lock."""
    return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)


def scheduler_running(state_dir: str | os.PathLike[str]) -> bool:
    """Whether a scheduler holds ``state_dir`` now (its folder lock, which it keeps while it runs
    and the kernel drops when it dies). A client checks this before it sends its token to the URL
    in ``scheduler.json``: after the scheduler stopped, whoever binds that port next would get it.
    True when the folder cannot be checked (the request then goes as it did before the check)."""
    try:
        folder = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(folder, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(folder, fcntl.LOCK_UN)
        return False
    finally:
        os.close(folder)
