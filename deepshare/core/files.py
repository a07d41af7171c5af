"""Reading a user's input file and checking an output path, as a careful Unix tool does.

Every file a command reads because a user named it (a trace, ``--history``, a cluster spec, a
config, link parameters, a job spec, a policy file) goes through :func:`read_input_bytes` or
:func:`read_input_text`, and every file a command writes is first checked by
:func:`check_output_path`:

* An input must be a regular file (or ``-``, standard input, where a caller allows it). The path
  is looked at before it is opened and the opened file again (``fstat``): ``/dev/zero`` would
  otherwise be read until memory runs out, and a FIFO without a writer would block forever. The
  file is opened with ``O_NONBLOCK``, so even a FIFO swapped in between the two looks never
  blocks the open; a device, FIFO, socket or directory is refused by name.
* An input is read up to a bound, and refused past it without reading the rest. The bounds:
  :data:`TRACE_BYTES` (512 MiB) for traces, ``--history`` and recorded throughput samples
  (``calibrate --samples``): the largest public traces (Helios, Philly) are a few hundred MB as
  CSV, and a trace parses to several times its size in memory, so a bigger file would exhaust a
  workstation anyway. :data:`POLICY_BYTES` (1 GiB) for policy checkpoints: a scorer is
  kilobytes to megabytes, a gigabyte leaves room for big networks. :data:`CONFIG_BYTES`
  (16 MiB) for what is written by hand or by ``deepshare`` itself (configs, cluster specs, job
  specs, link parameters): kilobytes in practice. The bounds are constants, not settings (the
  library reads no environment for configuration): a bigger trace is split or sampled first.
* An output is never written over an existing device, FIFO, socket or directory: the atomic
  replace (:mod:`deepshare.core.atomic`) would otherwise put a regular file in place of
  ``/dev/null`` (as root, destroying it for everybody) or of a FIFO a reader waits on.
* Every ``OSError`` of a path (name too long, a path through a regular file, no permission, a
  symlink loop) becomes one :class:`DeepShareError` line naming the path and the system's reason,
  which the CLI prints and exits 2 on.

Pure Python, standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Sequence

from deepshare.core.errors import DeepShareError

MiB = 1 << 20

TRACE_BYTES = 512 * MiB
"""Bound of trace files (``--trace``, ``--history``, ``trace stats``) and recorded samples."""

CONFIG_BYTES = 16 * MiB
"""Bound of configs, cluster and job specs and link parameters (kilobytes in practice)."""

POLICY_BYTES = 1024 * MiB
"""Bound of policy checkpoint files."""

STDIN = "-"

_CHUNK = 1 * MiB


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages: ``a directory``, ``a FIFO``, ..."""
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _size(n: int) -> str:
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n:,} bytes"


def _too_big(label: str, what: str, limit: int) -> DeepShareError:
    return DeepShareError(
        f"{label}: {what} is larger than the {_size(limit)} limit"
    )


def read_input_bytes(
    path: str | os.PathLike[str],
    what: str,
    max_bytes: int = CONFIG_BYTES,
    *,
    label: str | None = None,
    not_found: str | None = None,
    allow_stdin: bool = False,
) -> bytes:
    """The bytes of the regular file ``path`` (a ``what``: "trace file", "job spec"), at most
    ``max_bytes``; ``-`` is standard input when ``allow_stdin``.

    Errors are one :class:`DeepShareError` line starting with ``label`` (default the path):
    ``not_found`` (default ``"{what} not found"``) for a missing file, ``is a FIFO, expected a
    {what} (a regular file)`` for anything not regular, the size limit past it, and
    ``cannot read {what}: {reason}`` for any other failure of the path.
    """
    label = label or str(path)
    limit = max_bytes
    if allow_stdin and str(path) == STDIN:
        return _read_bounded(sys.stdin.buffer, label, what, limit)
    try:
        _refuse_special(os.stat(path).st_mode, label, what)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DeepShareError(f"{label}: {not_found or what + ' not found'}") from None
    except OSError as exc:
        raise DeepShareError(f"{label}: cannot read {what}: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        _refuse_special(info.st_mode, label, what)  # swapped between the two looks
        if info.st_size > limit:
            raise _too_big(label, what, limit)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return _read_bounded(fh, label, what, limit, first=info.st_size + 1)
    except OSError as exc:
        raise DeepShareError(f"{label}: cannot read {what}: {_reason(exc)}") from None
    finally:
        os.close(fd)


def read_input_text(
    path: str | os.PathLike[str],
    what: str,
    max_bytes: int = CONFIG_BYTES,
    *,
    label: str | None = None,
    not_found: str | None = None,
    allow_stdin: bool = False,
) -> str:
    """:func:`read_input_bytes` decoded as UTF-8; bytes that are not UTF-8 are one line naming
    the file, the line and the byte."""
    label = label or str(path)
    raw = read_input_bytes(path, what, max_bytes, label=label, not_found=not_found, allow_stdin=allow_stdin)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DeepShareError(
            f"{label} line {line}: cannot read {what}: expected UTF-8 text, got byte 0x{raw[exc.start]:02x}"
        ) from None


def _refuse_special(mode: int, label: str, what: str) -> None:
    if not stat.S_ISREG(mode):
        expected = "a regular file" if what == "file" else f"a {what} (a regular file)"
        raise DeepShareError(f"{label}: is {file_kind(mode)}, expected {expected}")


def _read_bounded(fh: BinaryIO, label: str, what: str, limit: int, first: int = _CHUNK) -> bytes:
    """At most ``limit`` bytes of ``fh``; one more is an error (a file that grew, or stdin).

    ``first`` is the size of the first read: a regular file's size plus one, so the whole file
    arrives in one buffer (no second copy when the chunks are joined) and EOF right after it."""
    chunks, total, size = [], 0, first
    while True:
        chunk = fh.read(min(size, limit + 1 - total))
        size = _CHUNK
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_big(label, what, limit)


def check_output_path(path: str | os.PathLike[str], what: str = "output", *, label: str | None = None) -> None:
    """Refuse to write ``what`` to ``path`` when it exists and is not a regular file (a device,
    FIFO, socket or directory), or when the path itself is unusable (too long, through a regular
    file, not searchable): one :class:`DeepShareError` line starting with ``label`` (default the
    path). A path that does not exist yet is fine here; writing it reports a missing folder."""
    label = label or str(path)
    text = os.fspath(path)
    if isinstance(text, str) and text.endswith((os.sep, os.sep + ".", os.sep + "..")) or text in (".", ".."):
        raise DeepShareError(f"{label}: cannot write {what}: the path names a folder (it ends in "
                             f"{'/' if text.endswith(os.sep) else text.rsplit(os.sep, 1)[-1]!r}); give a file path")
    system = _system_folder(text) if isinstance(text, str) else None
    if system is not None:
        raise DeepShareError(f"{label}: cannot write {what}: the path is in the system folder {system}, whose "
                             "entries are the system's (replacing /dev/stdout would replace it for everyone); "
                             "give a file path (--json - writes to standard output)")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DeepShareError(f"{label}: cannot write {what}: {_reason(exc)}") from None
    if not stat.S_ISREG(mode):
        raise DeepShareError(f"{label}: cannot write {what}: is {file_kind(mode)}, not a regular file")


_SYSTEM_TREES = ("/proc", "/sys")
"""Folders whose whole trees are the kernel's."""


def _system_folder(path: str) -> str | None:
    """The system folder ``path`` would be written in (``/dev`` itself, or anywhere under
    ``/proc`` or ``/sys``, as written or once resolved), or None. ``/dev/stdout`` redirected to a
    file is a symlink to a regular file: the atomic rename would replace the link itself, for every
    process of the machine (as root). ``/dev/shm`` and other folders below ``/dev`` stay usable."""
    parent = os.path.dirname(os.path.abspath(path))
    for folder in (parent, os.path.realpath(parent)):
        if folder == "/dev":
            return "/dev"
        tree = _kernel_tree(folder)
        if tree is not None:
            return tree
    return None


def _kernel_tree(path: str) -> str | None:
    """The tree of :data:`_SYSTEM_TREES` that the normalised absolute ``path`` lies in, if any."""
    return next((tree for tree in _SYSTEM_TREES if path == tree or path.startswith(tree + os.sep)), None)


def system_tree(folder: str) -> str | None:
    """The system tree an absolute folder path lies in, read as written (it names a folder on
    other machines, so it is not resolved here): ``/proc`` or ``/sys`` and below, or ``/dev`` and
    its entries other than ``/dev/shm`` (a memory-backed folder jobs may use); None otherwise. A
    job's folder there (``/dev/zero/<job id>``) could never be made, and ``/proc``'s and
    ``/sys``'s entries are the kernel's."""
    path = os.path.normpath(folder)
    if path.startswith("//"):  # POSIX leaves a leading '//' to the system; it is '/' here
        path = "/" + path.lstrip("/")
    tree = _kernel_tree(path)
    if tree is not None:
        return tree
    if path == "/dev" or (path.startswith("/dev/") and not (path == "/dev/shm" or path.startswith("/dev/shm/"))):
        return "/dev"
    return None


def numbered_rows(reader: Any, source: str) -> Iterator[tuple[int, Any]]:
    """``(line, row)`` of a ``csv.reader`` or ``csv.DictReader``: the line the row starts on
    (counted from where the reader stands, so a quoted field over several lines does not shift
    the rows after it); a row the csv module cannot read (a field over its 131,072-character
    limit, an unclosed quote, a NUL byte) is one :class:`DeepShareError` naming its line."""
    import csv

    end = reader.line_num
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DeepShareError(f"{source} line {end + 1}: expected CSV, {exc}") from None
        line, end = end + 1, reader.line_num
        yield line, row


def check_appendable(path: str | os.PathLike[str], what: str = "file") -> None:
    """What :func:`open_append` would refuse, found now: a symlink or anything but a regular
    file at ``path`` (a missing file is fine). A command checks its run folder's appended files
    before its work, not at its first append."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return
    if stat.S_ISLNK(mode):
        raise DeepShareError(f"{path}: cannot append to the {what}: is a symlink, which is not followed")
    if not stat.S_ISREG(mode):
        raise DeepShareError(f"{path}: cannot append to the {what}: is {file_kind(mode)}, not a regular file")


def open_append(path: str | os.PathLike[str], what: str = "file") -> Any:
    """``path`` opened to append text (created 0666 under the umask when missing), refusing a
    symlink in its place (``O_NOFOLLOW``): a log or CSV a run keeps appending to in a folder it
    reuses must not be redirected, by a link planted there, into another file. Anything but a
    regular file is refused too; errors are one :class:`DeepShareError` line naming the path."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        reason = "is a symlink, which is not followed" if os.path.islink(path) else _reason(exc)
        raise DeepShareError(f"{path}: cannot append to the {what}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DeepShareError(f"{path}: cannot append to the {what}: is {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", newline="", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def resolved(path: str | os.PathLike[str]) -> Path:
    """``Path(path).resolve()``, with a symlink loop on the way raised as the ``OSError``
    (``ELOOP``, naming ``path``) it is on Python 3.13 and later rather than Python 3.11's
    ``RuntimeError``: every caller that handles a path's OSError then handles a loop too, and the
    CLI prints it as one line."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path)) from None


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: equal once resolved, or the same inode (hard links); a
    path the system cannot look up names no file (False, not an OSError)."""
    try:
        if resolved(a) == resolved(b):
            return True
        return Path(a).exists() and Path(b).exists() and os.path.samefile(a, b)
    except OSError:
        return False


def remove_empty_folders(created: Sequence[str | os.PathLike[str]]) -> None:
    """Remove the folders ``created`` (outermost first), deepest first, each only if empty: one a
    run wrote into stays, and so do the folders that hold it (``rmdir`` refuses them); a sibling
    reached through ``..`` (``new/../new2``) is not one of them, so a refusal does not stop the
    rest. What a run that failed before its work leaves behind: no empty output folder."""
    for folder in reversed(created):
        try:
            os.rmdir(folder)
        except OSError:
            continue
