"""Where a job's rank logs live and how a bounded piece of one is read back.

Each rank's output (stdout and stderr, every attempt appended with a header line) goes to
``<state>/logs/<job id>/rank-<rank>.log``: under the scheduler's state folder, not the system
temp folder, so it survives the run and goes away with the state. On a multi-node cluster the
state folder must be on a filesystem every node sees (like checkpoints) for the scheduler to
serve the logs of ranks on other nodes.

The path is built only from a job id the journal knows and an integer rank; the HTTP route
never takes a path from the user, and :func:`rank_log_path` refuses anything that would leave
the logs folder.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from deepshare.core.files import resolved
from deepshare.runtime.private import open_regular

LOGS_DIR = "logs"
MAX_CHUNK = 64 * 1024
"""Most bytes one read (one HTTP answer) returns."""
LOG_FOLDERS = 2
"""Folders above a rank log that are opened without following a symlink (``logs`` and
``logs/<job>``, :func:`~deepshare.runtime.private.open_regular`): a job's process can replace
its own folder with a link to another job's."""
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}-[0-9]{1,18}\Z")


def rank_log_path(state_dir: str | Path, job_id: str, rank: int) -> Path:
    """``<state>/logs/<job id>/rank-<rank>.log``; ValueError for an id or rank that is not one."""
    if not JOB_ID_RE.match(job_id) or job_id in (".", ".."):
        raise ValueError(f"not a job id: {job_id[:80]!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank: expected an integer >= 0, got {rank!r}")
    root = resolved(state_dir) / LOGS_DIR
    path = root / job_id / f"rank-{rank}.log"
    if path.parent.parent != root:  # cannot happen with the checks above; kept as the invariant
        raise ValueError(f"not a job id: {job_id[:80]!r}")
    return path


MAX_LOG_DEPTH = 8
"""Folders below a job's logs folder that :func:`remove_job_logs` goes down at most (rank logs
lie in the job's folder itself; a job's process could nest folders deeper than Python recurses)."""
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""A folder, never through a link, never waiting (a FIFO, a device: ENOTDIR before it is opened)."""


def remove_job_logs(state_dir: str | Path, job_id: str) -> None:
    """Delete ``<state>/logs/<job id>`` and the rank logs in it (a pruned job's:
    ``--keep-finished``); nothing to do for a job that logged nothing. The job's process could
    write its logs folder, so neither ``logs`` nor the job's folder is followed if it is a link: a
    link in place of the job's folder is removed (not what it points to), a link in place of
    ``logs`` leaves everything as it is. Each folder is opened without following a link (a link
    swapped in between two calls included), so nothing outside is read or removed and no FIFO is
    opened. OSError for a folder that cannot be removed (one nested more than
    :data:`MAX_LOG_DEPTH` deep included)."""
    rank_log_path(state_dir, job_id, 0)  # ValueError for anything that is not a job id
    try:
        logs = os.open(resolved(state_dir) / LOGS_DIR, _OPEN_FOLDER)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # none, not a folder, a link
            return
        raise
    try:
        _remove(logs, job_id, job_id, 0)
    finally:
        os.close(logs)


def _remove(parent: int, name: str, shown: str, depth: int) -> None:
    """Remove ``name`` (``shown``: its path under ``logs``) from the folder open as ``parent``: a
    folder with what it holds, anything else (a file, a link, a FIFO) unlinked; gone already is done."""
    try:
        folder = os.open(name, _OPEN_FOLDER, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):  # ELOOP: a link (O_NOFOLLOW)
            raise
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        return
    try:
        if depth >= MAX_LOG_DEPTH:
            raise OSError(errno.EMLINK, f"folders nested more than {MAX_LOG_DEPTH} deep; left as they are", shown)
        for entry in os.listdir(folder):
            _remove(folder, entry, f"{shown}/{entry}", depth + 1)
    finally:
        os.close(folder)
    os.rmdir(name, dir_fd=parent)


@dataclass(frozen=True, slots=True)
class LogChunk:
    text: str
    offset: int
    """Byte offset the text starts at."""
    next_offset: int
    """Ask from here for what follows."""
    size: int
    """The log's size in bytes now (0 when the rank has written nothing yet)."""


def read_chunk(path: Path, offset: int, limit: int = MAX_CHUNK) -> LogChunk:
    """At most ``limit`` bytes of ``path`` from ``offset`` (negative: that many bytes before the end),
    cut at UTF-8 character boundaries: a chunk that would start inside a character starts after
    it, and one that would end inside a character ends before it (the next chunk, asked from
    ``next_offset``, holds it whole). The job's process can write its logs folder, so a symlink
    at the path or in place of ``logs/<job>`` or ``logs``, or a FIFO at the path, reads as no log
    (:func:`~deepshare.runtime.private.open_regular`)."""
    limit = max(0, min(limit, MAX_CHUNK))
    try:
        fh = os.fdopen(open_regular(path, os.O_RDONLY, parents=LOG_FOLDERS), "rb")
    except OSError:
        return LogChunk("", 0, 0, 0)
    with fh:
        size = fh.seek(0, 2)
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        fh.seek(start)
        data = fh.read(limit)
    if offset < 0:  # counted back from the end: may land inside a character
        skip = _continuations(data, 0)
        if skip < len(data):
            start, data = start + skip, data[skip:]
    end = _complete(data)
    if end:  # never an empty chunk before the end: a character cut for good is read as it is
        data = data[:end]
    return LogChunk(data.decode("utf-8", errors="replace"), start, start + len(data), size)


MAX_TAIL_LINES = 10_000_000
"""Most lines a ``tail`` read asks for."""
MAX_TAIL_SCAN = 64 * 1024 * 1024
"""Most bytes a ``tail`` read looks back over from a log's end: one request reads at most this
much of the file (a longer look back starts where it stopped)."""
_BREAK = re.compile(rb"\r\n|\r|\n")
"""A line break as ``deepshare logs`` prints one: ``\\n``, ``\\r\\n``, or a lone ``\\r`` (a
progress bar's redraw, shown as a new line)."""


def tail_offset(path: Path, lines: int, max_scan: int = MAX_TAIL_SCAN) -> int:
    """Where the last ``lines`` lines of the log at ``path`` start (a last line without its break
    is one; 0 lines: the end), looking back over at most ``max_scan`` bytes from the end (past
    that, where the look back stopped, moved on to a whole character); 0 for no log (opened as
    :func:`read_chunk` opens it). Line breaks are bytes no UTF-8 character holds, so the count
    needs no decoding."""
    try:
        fh = os.fdopen(open_regular(path, os.O_RDONLY, parents=LOG_FOLDERS), "rb")
    except OSError:
        return 0
    with fh:
        size = fh.seek(0, 2)
        if lines <= 0:
            return size
        floor, pos, found = max(0, size - max_scan), size, 0
        later = b""  # the first byte after the block being read (a CRLF may straddle the cut)
        while pos > floor:
            step = min(MAX_CHUNK, pos - floor)
            fh.seek(pos - step)
            block = fh.read(step)
            if len(block) != step:  # truncated meanwhile: a tail of what is left
                return 0
            # the CR of a CRLF whose LF (counted already, in the block after) ends that break
            straddle = block.endswith(b"\r") and later == b"\n"
            breaks = block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n") - straddle
            if pos == size and block.endswith((b"\n", b"\r")):
                breaks -= 1  # the break ending the last line starts no line
            if found + breaks < lines:  # a block without the line sought, counted in C (match by match,
                # a log of bare breaks cost 1.6 s of CPU per request, the GIL held all along)
                found, later, pos = found + breaks, block[:1], pos - step
                continue
            ends = [m.end() for m in _BREAK.finditer(block)]
            if straddle:
                ends.pop()
            for end in reversed(ends):
                at = pos - step + end  # where the line after this break starts
                if at == size:
                    continue  # the break ending the last line starts no line
                found += 1
                if found == lines:
                    return at
            later, pos = block[:1], pos - step
        if floor == 0:
            return 0
        fh.seek(floor)
        return floor + _continuations(fh.read(4), 0)


def _continuations(data: bytes, at: int) -> int:
    """How many UTF-8 continuation bytes (at most 3) ``data`` holds from ``at``."""
    n = 0
    while n < 3 and at + n < len(data) and data[at + n] & 0xC0 == 0x80:
        n += 1
    return n


def _complete(data: bytes) -> int:
    """The length of ``data`` without a UTF-8 character its end cuts (``len(data)`` when none is)."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if lead & 0xC0 == 0x80:
            continue  # a continuation byte: the character starts further back
        need = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 1
        return len(data) - back if need > back else len(data)
    return len(data)
