"""Where a ``deepshare`` command writes: one meaning for ``--json`` and one guard for outputs.

* ``--json PATH`` writes a file (atomically: a reader sees the old file or the whole new one;
  an existing file is replaced), ``--json -`` writes the JSON to standard output. With ``-``
  the command's human-readable output (tables, "wrote ..." lines) goes to standard error, so
  standard output is exactly one JSON document that a pipe can parse.
* :func:`check_outputs` refuses, before any work, an output path that is one of the command's
  own inputs (resolved, so ``./t.csv``, a symlink or a hard link to ``t.csv`` count), two
  outputs that are the same file, an empty path, an output in a missing folder or in one it
  cannot create files in, an output that exists and is
  not a regular file (a folder, a device such as ``/dev/null``, a FIFO, a socket: the atomic
  replace would put a regular file in its place) and an unusable path (too long, through a
  regular file, not searchable), each as one line naming the flag and the path.

* A command with several outputs (``simulate --json --jobs-csv``, ``evaluate --json --out``, ...)
  stages them in one :class:`~deepshare.core.output_set.OutputSet` (:func:`add_json`,
  :func:`announce`) and commits them together at the end: a run that fails leaves every earlier
  output as it was, never one new file beside an old one.

Every subcommand module uses these, so the rules cannot drift between commands.
"""

from __future__ import annotations

import argparse
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from deepshare.cli.args import print_line
from deepshare.core.atomic import write_text_atomic
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.files import check_output_path, remove_empty_folders, resolved, same_file
from deepshare.core.json_text import json_text
from deepshare.core.output_set import OutputSet

STDOUT = "-"
"""The ``--json`` value that means standard output."""

REPLACED = "an existing file is replaced"
"""What the help of every output flag says about existing files (the one documented overwrite)."""


def add_json_flag(p: argparse.ArgumentParser, what: str) -> None:
    """``--json PATH|-``: write ``what`` as JSON to PATH, or to standard output with ``-``."""
    p.add_argument("--json", metavar="PATH|-", help=f"write {what} as JSON to PATH ({REPLACED}), or - for standard output")


def to_stdout(path: str | None) -> bool:
    """Whether ``--json`` names standard output."""
    return path == STDOUT


def skipped_jobs(skipped: Sequence[tuple[str, str]]) -> str:
    """One line for a trace's skipped jobs (id, reason): how many, and the first, escaped (an id
    is the trace's text, and may hold a terminal escape)."""
    job_id, why = skipped[0]
    return (f"{len(skipped)} job(s) in the trace cannot be simulated and were skipped "
            f"(first: {one_line(job_id)}: {one_line(why)})")


def human(path: str | None, out: Any, err: Any) -> Any:
    """The console for human-readable output: standard error when the JSON goes to standard output."""
    return err if to_stdout(path) else out


def dumps(doc: Any) -> str:
    """The JSON text every command writes: indented, one trailing newline, standard JSON (a
    number that is not finite, e.g. the mean of no cross-validation fold, is written as null:
    Python's ``NaN`` is refused by jq, JavaScript and strict parsers): :func:`~deepshare.core.json_text.json_text`."""
    return json_text(doc)


def write_json(path: str | None, doc: Any, out: Any, what: str) -> None:
    """Write ``doc`` to ``path`` (atomically), to ``out`` when ``path`` is ``-``, nowhere when None."""
    if path is None:
        return
    if to_stdout(path):
        print_line(out, dumps(doc).rstrip("\n"))
        return
    write_text_atomic(path, dumps(doc), what)


def add_json(outputs: OutputSet, path: str | None, doc: Any, out: Any, what: str) -> None:
    """:func:`write_json` as one of ``outputs``: the text is made now (a document that cannot be
    written fails before any output is in place), the file is put in place with the others, and
    ``-`` prints the JSON once they are."""
    if path is None:
        return
    text = dumps(doc)
    if to_stdout(path):
        outputs.after_commit(lambda: print_line(out, text.rstrip("\n")))
        return
    outputs.add_text(path, text, what)


def announce(outputs: OutputSet, shown: Any, path: str | os.PathLike[str]) -> None:
    """Print "wrote PATH" on ``shown`` once ``outputs`` are in place (never for a discarded run)."""
    outputs.after_commit(lambda: print_line(shown, f"wrote {one_line(str(path))}"))


def folder_outputs(folder: str | None, names: Sequence[str], flag: str = "--out") -> list[str]:
    """The files a command writes into an output folder (for :func:`check_outputs`); an empty
    folder name is refused (it would mean no folder, silently)."""
    if folder == "":
        raise DeepShareError(f"{flag} '': an empty path; give {flag} a folder")
    return [] if folder is None else [str(Path(folder) / name) for name in names]


def check_outputs(
    outputs: Mapping[str, str | Iterable[str] | None],
    inputs: Mapping[str, str | Iterable[str] | None],
    new_folders: Sequence[str | None] = (),
) -> None:
    """Fail before any work when an output cannot be written or would overwrite an input.

    ``outputs`` and ``inputs`` map a flag (``--json``, ``--trace``) to a path, several paths or
    None (not given). ``-`` for ``--json`` is standard output and never a file; for any other
    output flag it is refused (it would create a file named ``-``). An input that does not exist
    is still compared by its path: a command that reports a missing input (``cluster validate``
    lists it as failed) must not then write its report under that input's name; an empty input
    path is refused, naming its flag. Outputs inside
    ``new_folders`` (folders the command creates) are not required to have an existing folder.
    """
    for flag, path in _pairs(outputs):
        if path == STDOUT and flag != "--json":
            raise DeepShareError(f"{flag} -: only --json can write to standard output; give {flag} a file path")
    flagged_out = [(flag, p) for flag, p in _pairs(outputs) if p != STDOUT]
    for folder in new_folders:
        if folder is not None:
            _check_own_folder(folder)
    made = [resolved(f) for f in new_folders if f is not None]
    for flag, path in flagged_out:
        _check_writable(flag, path, made)
    for flag, path in _pairs(inputs):
        if not path:  # an unset variable: the error would name no file and no flag
            raise DeepShareError(f"{flag} '': an empty path; give {flag} a file path")
    flagged_in = [(flag, p) for flag, p in _pairs(inputs) if not os.path.isdir(p)]  # never OSError
    seen: list[tuple[str, str]] = []
    for flag, path in flagged_out:
        for in_flag, in_path in flagged_in:
            if same_file(path, in_path):
                raise DeepShareError(
                    f"{flag} {path}: is the input {in_flag} {in_path}; writing it would destroy the input, choose another path"
                )
        for other_flag, other in seen:
            if same_file(path, other):
                raise DeepShareError(f"{flag} {path}: is also the output {other_flag} {other}; give each output its own path")
        seen.append((flag, path))


def _check_own_folder(folder: str) -> None:
    """A run folder the command writes many files into (``new_folders``) is not one another user
    planted in a shared folder (sticky and writable by anyone, as ``/tmp``): neither a link they
    made there, on the way to it or as it (it would send every file of the run where they chose),
    nor a folder of theirs (they could read, replace or redirect the run's files as they are
    written). The rule is the kernel's for links in such folders (``fs.protected_symlinks``),
    applied to folders too and found before the work: a link or folder of root, of this user or
    of the shared folder's owner is fine, and elsewhere (a home, a project share, a mount whose
    files all show one owner) nothing is refused."""
    me = os.geteuid()
    path = Path(os.path.normpath(folder))  # "link/" and "link/." name the link itself
    for part in (*reversed(path.parents), path):  # each existing component: "/tmp/theirs/run" goes through it
        if str(part) in (".", "..", os.sep):
            continue
        try:
            info, shared = os.lstat(part), os.stat(part.parent)
        except OSError:
            break  # not there yet: the command makes the rest, as this user
        planted = _in_shared_folder(shared) and info.st_uid not in (me, 0, shared.st_uid)
        if planted and (stat.S_ISLNK(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            where = "" if part == path else f"{part} "
            kind = "link" if stat.S_ISLNK(info.st_mode) else "folder"
            raise DeepShareError(f"output folder {folder}: {where}is a {kind} another user (uid {info.st_uid}) made in "
                                 f"the shared folder {part.parent}, who could redirect, read or replace the run's "
                                 "files; give a folder of your own")


def _in_shared_folder(info: os.stat_result) -> bool:
    """Whether ``info`` is a folder anyone may create in and only owners delete from (``/tmp``)."""
    return stat.S_ISDIR(info.st_mode) and bool(info.st_mode & stat.S_ISVTX) and bool(info.st_mode & stat.S_IWOTH)


def _pairs(paths: Mapping[str, str | Iterable[str] | None]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for flag, value in paths.items():
        if value is None:
            continue
        for p in [value] if isinstance(value, (str, os.PathLike)) else value:
            pairs.append((flag, str(p)))
    return pairs


def _check_writable(flag: str, path: str, made: Sequence[Path]) -> None:
    """The output ``path`` of ``flag`` is a new path or a regular file, in an existing folder this
    process can create files in (or one the command makes), and the system can look it up (no
    name too long, no regular file where a folder should be); an empty path is no path."""
    if not path:
        raise DeepShareError(f"{flag} '': an empty path; give {flag} a file path")
    check_output_path(path, "output", label=f"{flag} {path}")
    folder = Path(path).parent
    if os.path.isdir(folder):
        _probe(flag, path, folder)
    elif resolved(folder) not in made:
        raise DeepShareError(f"{flag} {path}: folder {str(folder)!r} does not exist")


def _probe(flag: str, path: str, folder: Path) -> None:
    """Create and remove a file in ``folder``, as the atomic write will: a folder it cannot write
    in (no permission, a read-only file system, ``/proc``) is refused before the work, not after
    it (permission bits do not say so for root, nor for a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".deepshare-probe-", suffix=".tmp")
    except OSError as exc:
        raise DeepShareError(f"{flag} {path}: cannot write in folder {str(folder)!r}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)


@contextmanager
def run_folder(flag: str, path: str | None) -> Iterator[None]:
    """:func:`make_folder` for the ``with`` block (nothing for None); when the block fails, the
    folders it created that are still empty are removed again: a run refused on its input (a job
    the simulator rejects, an unreachable ``--address``) leaves no empty folder behind. Only the
    folders this call created are removed, never one that was there (``new/../mine`` keeps
    ``mine``)."""
    if path is None:
        yield
        return
    created = make_folder(flag, path)
    try:
        yield
    except BaseException:
        remove_empty_folders(created)
        raise


def make_folder(flag: str, path: str) -> list[str]:
    """Create the output folder ``path`` (and its parents) before the work, or fail with one line
    naming ``flag``: a dangling link or a file in its way found after an hour's run loses the run.

    The path is walked as the system resolves it, one component at a time (``new/../mine``
    makes ``new``, then finds ``mine`` through it), and the folders this call created are
    returned, outermost first; when it fails partway (a name too long, a file in the way) those
    are removed again before the error."""
    created: list[str] = []
    current = ""
    try:
        for part in Path(path).parts:
            current = os.path.join(current, part)
            if part == os.pardir:
                continue  # there once what leads to it is
            try:
                os.mkdir(current)
            except OSError:
                if not os.path.isdir(current):  # a file, a dangling link, no permission, too long
                    raise
            else:
                created.append(current)
    except OSError as exc:
        remove_empty_folders(created)
        raise DeepShareError(f"{flag} {path}: cannot create the folder ({exc.strerror or exc})") from None
    return created
