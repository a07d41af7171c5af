"""One scheduler per state folder: an exclusive ``flock`` on ``<state>/scheduler.lock``.

Two schedulers on one journal would each launch the same queued job; the lock makes the second
one fail at start with a clear error. The kernel drops the lock when the holder dies (even by
SIGKILL), so a crashed scheduler never blocks its restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from deepshare.core.errors import DeepShareError
from deepshare.runtime.private import make_private_dirs


class StateLock:
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / "scheduler.lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> "StateLock":
        try:
            make_private_dirs(self.path.parent)
            fh = open(self.path, "a+", encoding="utf-8")
        except OSError as exc:
            raise DeepShareError(f"--state {self.path.parent}: cannot create the lock file ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise DeepShareError(
                f"--state {self.path.parent}: another scheduler (pid {holder}) is using this state folder"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
