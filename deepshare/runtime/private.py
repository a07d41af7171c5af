"""Folders only the scheduler's user can enter: the state folder and the rank logs below it.

``Path.mkdir(parents=True, mode=0o700)`` applies the mode to the last folder only; the parents it
creates get the umask's default (0755, or 0777 under umask 0), which would leave the state folder
listable or even writable by other users (who could then replace ``scheduler.json`` and point
the clients, and their token, elsewhere). Folders that exist already are left as they are: an
operator who made a shared folder group-readable meant it.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700


def make_private_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and every missing parent with mode 0700 (whatever the umask); ``path``."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:  # made meanwhile by another process: leave its mode alone
            continue
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    return path
