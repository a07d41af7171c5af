"""Reading inputs and checking outputs as a careful Unix tool does (issue 35 item 3).

:mod:`deepshare.core.files`: an input must be a regular file within a size bound, opened without
ever blocking; an output never replaces a device, FIFO, socket or folder; every path error is one
:class:`DeepShareError` line naming the path. Also the two writers built on it
(:func:`write_bytes_atomic`, :class:`JobsCsvStream`).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import stat
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from deepshare.core import files
from deepshare.core.atomic import write_bytes_atomic, write_text_atomic
from deepshare.core.errors import DeepShareError
from deepshare.core.files import (
    MiB, check_output_path, file_kind, read_input_bytes, read_input_text, system_tree,
)
from deepshare.core.jobs_csv import JobsCsvStream

LONG_NAME = "a" * 5000


@pytest.fixture
def nodes() -> Iterator[dict[str, Path]]:
    """A FIFO (no writer), a bound socket and, where the system allows, a character device node
    like /dev/null, in a short folder (a socket's path must stay under 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="dsf-"))
    made = {"fifo": folder / "fifo", "socket": folder / "sock"}
    os.mkfifo(made["fifo"])
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(made["socket"]))
    try:
        os.mknod(folder / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made["device"] = folder / "null"
    except (OSError, AttributeError):
        pass  # not root: the device cases skip
    try:
        yield made
    finally:
        sock.close()
        shutil.rmtree(folder)


def promptly(call: Callable[[], object], seconds: float = 10.0) -> object:
    """``call()`` in a thread; fail (rather than hang the suite) if it has not returned in time."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value")


def one_line(exc: pytest.ExceptionInfo[DeepShareError], *needles: str) -> str:
    text = str(exc.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


# -- inputs ---------------------------------------------------------------------------------------
def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,2\n")
    assert read_input_bytes(path, "trace file") == b"a,b\n1,2\n"
    assert read_input_text(path, "trace file") == "a,b\n1,2\n"
    link = tmp_path / "link.csv"
    link.symlink_to(path)  # a symlink to a regular file is that file
    assert read_input_bytes(link, "trace file") == b"a,b\n1,2\n"


def test_dev_zero_is_refused_as_a_character_device_without_reading() -> None:
    with pytest.raises(DeepShareError) as exc:
        promptly(lambda: read_input_bytes("/dev/zero", "trace file", files.TRACE_BYTES))
    assert one_line(exc, "/dev/zero") == "/dev/zero: is a character device, expected a trace file (a regular file)"


def test_a_fifo_without_writer_is_refused_at_once(nodes: dict[str, Path]) -> None:
    with pytest.raises(DeepShareError) as exc:
        promptly(lambda: read_input_bytes(nodes["fifo"], "trace file"))
    one_line(exc, str(nodes["fifo"]), "is a FIFO")


def test_a_fifo_swapped_in_after_the_first_look_never_blocks_the_open(nodes: dict[str, Path], monkeypatch) -> None:
    """The path looked regular, then a FIFO took its place: O_NONBLOCK opens it at once and the
    opened file's own fstat refuses it."""
    real_stat = os.stat
    monkeypatch.setattr(files.os, "stat", lambda p, *a, **k: real_stat(__file__))
    with pytest.raises(DeepShareError) as exc:
        promptly(lambda: read_input_bytes(nodes["fifo"], "history"))
    monkeypatch.setattr(files.os, "stat", real_stat)
    one_line(exc, "is a FIFO")


def test_a_socket_and_a_directory_are_refused_by_name(nodes: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DeepShareError) as exc:
        read_input_bytes(nodes["socket"], "job spec")
    one_line(exc, str(nodes["socket"]), "is a socket, expected a job spec")
    with pytest.raises(DeepShareError) as exc:
        read_input_bytes(tmp_path, "trace file")
    one_line(exc, "is a directory, expected a trace file")
    with pytest.raises(DeepShareError) as exc:
        read_input_bytes(tmp_path, "file")
    one_line(exc, "is a directory, expected a regular file")


def test_a_file_past_the_bound_is_refused_without_reading_it(tmp_path: Path) -> None:
    sparse = tmp_path / "huge.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(files.TRACE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(DeepShareError) as exc:
        promptly(lambda: read_input_bytes(sparse, "trace file", files.TRACE_BYTES))
    one_line(exc, str(sparse), "larger than the 512 MiB limit")
    small = tmp_path / "small.json"
    small.write_bytes(b"x" * 101)
    with pytest.raises(DeepShareError, match="larger than the 100 bytes limit"):
        read_input_bytes(small, "config", 100)
    assert read_input_bytes(small, "config", 101) == b"x" * 101  # the bound itself is allowed


def test_a_stream_that_grows_past_the_bound_is_cut_at_one_byte_more() -> None:
    """The size from fstat can be stale (a file still being written): the read itself stops at
    the bound plus one byte and refuses, never reading on."""
    endless = io.BytesIO(b"y" * (3 * MiB))
    with pytest.raises(DeepShareError, match="larger than the 1 MiB limit"):
        files._read_bounded(endless, "f", "trace file", 1 * MiB)
    assert endless.tell() == MiB + 1


def test_path_errors_are_one_line_with_the_system_reason(tmp_path: Path) -> None:
    regular = tmp_path / "reg"
    regular.write_text("x")
    cases = [
        (tmp_path / LONG_NAME, "File name too long"),
        (regular / "x.csv", "Not a directory"),
    ]
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    cases.append((loop, "Too many levels of symbolic links"))
    for path, reason in cases:
        with pytest.raises(DeepShareError) as exc:
            read_input_bytes(path, "trace file")
        assert one_line(exc) == f"{path}: cannot read trace file: {reason}"


def test_not_found_and_labels(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(DeepShareError, match=r"nope.csv: trace file not found$"):
        read_input_bytes(missing, "trace file")
    with pytest.raises(DeepShareError, match=r"^--samples x: file not found$"):
        read_input_bytes(missing, "samples file", label="--samples x", not_found="file not found")


def test_text_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(DeepShareError) as exc:
        read_input_text(path, "config")
    one_line(exc, "bad.yaml line 2", "UTF-8", "0xff")


def test_dash_is_standard_input_only_where_allowed(tmp_path: Path, monkeypatch) -> None:
    class Stdin:
        buffer = io.BytesIO(b"job_id,gpus\n")

    monkeypatch.setattr(files.sys, "stdin", Stdin())
    assert read_input_bytes("-", "trace file", allow_stdin=True) == b"job_id,gpus\n"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DeepShareError, match="^-: trace file not found$"):  # otherwise "-" is a file name
        read_input_bytes("-", "trace file")
    Stdin.buffer = io.BytesIO(b"z" * 2048)
    with pytest.raises(DeepShareError, match="larger than the 1,024 bytes limit"):
        read_input_bytes("-", "trace file", 1024, allow_stdin=True)


def test_file_kind_names_every_special_file() -> None:
    assert file_kind(stat.S_IFDIR) == "a directory"
    assert file_kind(stat.S_IFCHR) == "a character device"
    assert file_kind(stat.S_IFBLK) == "a block device"
    assert file_kind(stat.S_IFIFO) == "a FIFO"
    assert file_kind(stat.S_IFSOCK) == "a socket"


# -- outputs --------------------------------------------------------------------------------------
def test_new_paths_and_regular_files_may_be_written(tmp_path: Path) -> None:
    check_output_path(tmp_path / "new.json")
    check_output_path(tmp_path / "missing-folder" / "new.json")  # the writer reports the folder
    (tmp_path / "old.json").write_text("{}")
    check_output_path(tmp_path / "old.json")


def test_outputs_never_replace_a_special_file(nodes: dict[str, Path], tmp_path: Path) -> None:
    targets = [(nodes["fifo"], "a FIFO"), (nodes["socket"], "a socket"), (tmp_path, "a directory")]
    if "device" in nodes:
        targets.append((nodes["device"], "a character device"))
    for path, kind in targets:
        before = os.stat(path)
        with pytest.raises(DeepShareError) as exc:
            check_output_path(path, "report", label=f"--json {path}")
        assert one_line(exc) == f"--json {path}: cannot write report: is {kind}, not a regular file"
        for write in (lambda: write_text_atomic(path, "{}\n", "report"), lambda: JobsCsvStream(path)):
            with pytest.raises(DeepShareError, match=f"is {kind}"):
                write()
        after = os.stat(path)
        assert (stat.S_IFMT(after.st_mode), after.st_ino, after.st_rdev) == (
            stat.S_IFMT(before.st_mode), before.st_ino, before.st_rdev)  # still the same node
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind


def test_a_symlink_to_a_device_is_refused(nodes: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(nodes["fifo"])
    with pytest.raises(DeepShareError, match="is a FIFO"):
        write_bytes_atomic(link, b"{}")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_output_path_errors_are_one_line(tmp_path: Path) -> None:
    regular = tmp_path / "reg"
    regular.write_text("x")
    for path, reason in ((tmp_path / LONG_NAME, "File name too long"), (regular / "x.json", "Not a directory")):
        for write in (lambda: check_output_path(path, "report"), lambda: write_bytes_atomic(path, b"x", "report"),
                      lambda: JobsCsvStream(path, "report")):
            with pytest.raises(DeepShareError) as exc:
                write()
            assert one_line(exc) == f"{path}: cannot write report: {reason}"


def test_a_longest_allowed_name_is_still_written_atomically(tmp_path: Path) -> None:
    """The temporary file's name is cut, so a 255-byte target name leaves room for it."""
    target = tmp_path / ("n" * 255)
    write_bytes_atomic(target, b"ok")
    assert target.read_bytes() == b"ok"
    with JobsCsvStream(tmp_path / ("m" * 255)) as out:
        pass
    assert out.target.read_text().startswith("job_id,")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["n" * 255, "m" * 255])


@pytest.mark.parametrize("folder, tree", [
    ("/dev", "/dev"), ("/dev/zero", "/dev"), ("/dev/null/x", "/dev"), ("/dev/shm/../zero", "/dev"),
    ("/proc", "/proc"), ("/proc/self/cwd", "/proc"), ("//proc/1", "/proc"), ("///sys/kernel", "/sys"),
    ("/tmp/../sys", "/sys"), ("/sys/.", "/sys"),
    ("/dev/shm", None), ("/dev/shm/ckpt", None), ("/devices", None), ("/procs/x", None), ("/srv/sys", None),
    ("/", None), ("/ckpt/a", None),
])
def test_system_tree_names_the_kernel_and_device_folders_as_written(folder, tree):
    assert system_tree(folder) == tree
