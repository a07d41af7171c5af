"""Folders only the scheduler's user can enter: the state folder and the rank logs below it.

``Path.mkdir(parents=True, mode=0o700)`` applies the mode to the last folder only; the parents it
creates get the umask's default (0755, or 0777 under umask 0), which would leave the state folder
listable or even writable by other users (who could then replace ``scheduler.json`` and point
the clients, and their token, elsewhere). Folders that exist already are left as they are: an
operator who made a shared folder group-readable meant it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from deepshare.core.errors import DeepShareError

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


def check_not_shared(path: str | os.PathLike[str], flag: str = "--state", files: str = "the scheduler's files",
                     instead: str = "choose a state folder of your own") -> None:
    """Refuse a state folder another user could take over, as ``ssh`` refuses such a ``~/.ssh``:
    ``path`` (where it exists) must be this user's (or root's) and writable by no one else, and
    each existing parent this user's or root's and, unless sticky (``/tmp``), writable by no one
    else: whoever can write one of them can rename the folder away and put their own in its place
    (a ``scheduler.json`` naming their listener, to which the clients send their token; a journal
    whose jobs the scheduler runs). A :class:`DeepShareError` names the folder and the fix
    (``files``: what another user could replace there; ``instead``: the way out)."""
    path = Path(os.path.abspath(path))
    me = os.geteuid()
    for folder in (path, *path.parents):
        try:
            info = os.stat(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DeepShareError(f"{flag} {path}: cannot check {folder} ({exc.strerror or exc})") from None
        if info.st_uid not in (me, 0):
            raise DeepShareError(f"{flag} {path}: {folder} belongs to another user (uid {info.st_uid}), who could "
                                 f"replace {files}; {instead}")
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and (folder == path or not info.st_mode & stat.S_ISVTX):
            raise DeepShareError(f"{flag} {path}: {folder} is writable by other users (mode "
                                 f"{stat.S_IMODE(info.st_mode):04o}), who could replace {files}; "
                                 f"run 'chmod go-w {folder}' or {instead}")


MAX_LINKS = 40
"""Links followed before a path is refused as a loop (Linux's own limit)."""


def check_file_not_shared(path: str | os.PathLike[str], flag: str, files: str, instead: str) -> None:
    """Refuse a file another user could change or replace, under :func:`check_not_shared`'s rules,
    checked along the way the system resolves ``path``: each folder a name is looked up in
    (the folders of the middle links of a chain too, which the path's and its target's parents
    leave out: whoever could write one could point the chain at their own file between this check
    and the read), each link followed (owned by this user or root: in a sticky folder such as
    ``/tmp`` its owner may replace it) and the file. Every name on the way then stays as checked:
    no other user can change one between the check and the read.

    A folder or file on a read-only mount is not writable, whatever its mode: a Kubernetes
    ``configMap`` volume is a read-only mount of a folder of mode 0777 (its ``..data`` link
    chain inside). A missing name ends the check: the read reports it."""
    shown = Path(os.getcwd(), path)  # not normalised: a link before a ".." is followed first, as the system does
    me = os.geteuid()

    def refuse(why: str, fix: str) -> DeepShareError:
        return DeepShareError(f"{flag} {shown}: {why}, who could replace {files}; {fix}")

    def check(entry: Path, final: bool) -> bool:
        """Whether to go on (``entry`` exists and is a folder or the file)."""
        try:
            info = os.stat(entry)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise DeepShareError(f"{flag} {shown}: cannot check {entry} ({exc.strerror or exc})") from None
        if info.st_uid not in (me, 0):
            raise refuse(f"{entry} belongs to another user (uid {info.st_uid})", instead)
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and (final or not info.st_mode & stat.S_ISVTX) and not _read_only(entry):
            raise refuse(f"{entry} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o})",
                         f"run 'chmod go-w {entry}' or {instead}")
        return final or stat.S_ISDIR(info.st_mode)

    folder = Path(shown.anchor)
    pending = list(shown.parts[1:])
    links = 0
    if not check(folder, not pending):
        return
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            folder = folder.parent  # folder has no link in it: its parent is the one ".." names
            continue
        entry = folder / name
        try:
            info = os.lstat(entry)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise DeepShareError(f"{flag} {shown}: cannot check {entry} ({exc.strerror or exc})") from None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise DeepShareError(f"{flag} {shown}: too many levels of symbolic links")
            if info.st_uid not in (me, 0):
                raise refuse(f"{entry} is a link that belongs to another user (uid {info.st_uid})", instead)
            target = Path(os.readlink(entry))
            if target.is_absolute():
                folder, pending = Path(target.anchor), [*target.parts[1:], *pending]
            else:
                pending = [*target.parts, *pending]
            continue
        if not check(entry, not any(part not in ("", ".") for part in pending)):
            return
        folder = entry


def _read_only(path: Path) -> bool:
    """Whether ``path`` is on a read-only mount."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def open_regular(path: str | os.PathLike[str], flags: int, parents: int = 0) -> int:
    """A descriptor on ``path`` for ``flags`` (created 0600 with ``O_CREAT``), refused unless it is a
    regular file (``OSError``): a job's own process can write its logs folder, so a symlink there
    is not followed (the rank's output would go to, or the API would serve, the file it names)
    and a FIFO is not waited on (opening one blocks until the other end comes).

    ``parents``: how many of the folders just above the file must not be symlinks either (each
    is opened with ``O_NOFOLLOW | O_DIRECTORY`` and the next name is opened relative to it).
    ``O_NOFOLLOW`` alone covers the last name only: a rank log's job folder
    ``logs/<job>`` replaced by a link to another job's folder was followed, so one job's owner
    read, and its rank wrote, another job's log."""
    path = Path(path)
    names = path.parts[len(path.parts) - 1 - parents:]
    folder = os.open(path.parents[parents], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            outer, folder = folder, inner  # the finally closes the inner one even if this close fails
            os.close(outer)
        fd = os.open(names[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
