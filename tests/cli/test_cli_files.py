"""Files are read and written as a careful Unix tool does (issue 35 item 3), through the CLI.

Each observed row: ``/dev/zero`` as an input was read until memory ran out; a FIFO without a
writer as ``--history`` hung forever; ``--json``/``--jobs-csv``/``--out`` naming a device node or
a FIFO replaced it with a regular file; a 5,000-character name or a path through a regular file
was a traceback. Now each is one ``deepshare: error:`` line, exit 2, and special files are left
as they were.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest
from cli_run import cli, one_error_line

import deepshare.cli.trace as trace_cli
import deepshare.core.traces.base as trace_base

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "fixtures" / "cli" / "oversized.csv"
SIM = ["simulate", "--trace", SMALL, "--policy", "las+spread"]
LONG_NAME = "a" * 5000


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def nodes() -> Iterator[dict[str, Path]]:
    """A FIFO (no writer), a bound socket and, where the system allows, a character device node
    like /dev/null (never /dev/null itself), in a short folder (socket paths stay < 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="dscf-"))
    made = {"fifo": folder / "fifo", "socket": folder / "sock"}
    os.mkfifo(made["fifo"])
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(made["socket"]))
    try:
        os.mknod(folder / "fakenull", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made["device"] = folder / "fakenull"
    except (OSError, AttributeError):
        pass
    try:
        yield made
    finally:
        sock.close()
        shutil.rmtree(folder)


def run_promptly(capsys, *argv: object, seconds: float = 60.0) -> tuple[int, str, str]:
    """``cli(...)`` that fails the test instead of hanging it when the command blocks."""
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(value=cli(capsys, *argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"deepshare {argv} still blocked after {seconds} s"
    return result["value"]  # type: ignore[return-value]


def fingerprint(path: Path) -> tuple[int, int, int]:
    info = os.lstat(path)
    return stat.S_IFMT(info.st_mode), info.st_ino, info.st_rdev


# -- inputs that are not regular files ------------------------------------------------------------
DEV_ZERO_INPUTS = [
    ("--trace", ["simulate", "--trace", "/dev/zero", "--policy", "las+spread"], "/dev/zero: is a character device"),
    ("trace stats", ["trace", "stats", "/dev/zero"], "/dev/zero: is a character device"),
    ("--history", SIM + ["--history", "/dev/zero"], "--history: /dev/zero: is a character device"),
    ("--true-params", SIM + ["--contention", "link", "--true-params", "/dev/zero"], "--true-params: /dev/zero: is a character device"),
    ("--link-params", SIM + ["--contention", "link", "--link-params", "/dev/zero"], "/dev/zero: is a character device"),
    ("--cluster", SIM + ["--cluster", "/dev/zero"], "--cluster '/dev/zero': is a character device"),
    ("calibrate --samples", ["calibrate", "--samples", "/dev/zero"], "--samples /dev/zero: is a character device"),
    ("autoscale --config", ["autoscale", "simulate", "--trace", SMALL, "--config", "/dev/zero"], "--config /dev/zero: is a character device"),
    ("cluster validate", ["cluster", "validate", "/dev/zero"], "/dev/zero: is a character device"),
    ("submit", ["submit", "/dev/zero", "--url", "http://127.0.0.1:9"], "/dev/zero: is a character device"),
]


@pytest.mark.parametrize(("argv", "needle"), [c[1:] for c in DEV_ZERO_INPUTS], ids=[c[0] for c in DEV_ZERO_INPUTS])
def test_dev_zero_inputs_are_refused_at_once(capsys, argv, needle) -> None:
    """Reading ``/dev/zero`` is safe to try: it is refused as a character device before any read
    (it used to be read until memory ran out, 8-20 GB)."""
    rc, out, err = run_promptly(capsys, *argv)
    assert (rc, out) == (2, "")
    one_error_line(err, needle)


def test_history_fifo_without_writer_is_refused_not_waited_on(capsys, nodes) -> None:
    rc, out, err = run_promptly(capsys, *SIM, "--history", nodes["fifo"], seconds=30)
    assert (rc, out) == (2, "")
    one_error_line(err, f"--history: {nodes['fifo']}: is a FIFO, expected a trace file (a regular file)")
    assert stat.S_ISFIFO(os.stat(nodes["fifo"]).st_mode)


def test_trace_fifo_and_socket_are_refused(capsys, nodes) -> None:
    for kind, path in (("a FIFO", nodes["fifo"]), ("a socket", nodes["socket"])):
        rc, _, err = run_promptly(capsys, "trace", "stats", path, seconds=30)
        assert rc == 2
        one_error_line(err, str(path), f"is {kind}")


def test_an_oversize_trace_is_refused_naming_the_limit_and_how_to_raise_it(capsys, tmp_path) -> None:
    sparse = tmp_path / "huge.csv"
    with open(sparse, "wb") as fh:
        fh.truncate(600 << 20)  # sparse: past the 512 MiB bound, costs no disk
    rc, _, err = run_promptly(capsys, "trace", "stats", sparse)
    assert rc == 2
    one_error_line(err, "huge.csv: trace file is larger than the 512 MiB limit")


def test_a_history_past_the_bound_is_refused_naming_the_flag(capsys, tmp_path, monkeypatch) -> None:
    history = tmp_path / "past.csv"
    # a real trace (its jobs renamed: the trace's own jobs are refused as history) padded past 2 MiB
    history.write_bytes(SMALL.read_bytes().replace(b"\nsmall-", b"\npast-").replace(b"\nhuge", b"\npast-huge")
                        + b"\n" * (2 << 20))
    monkeypatch.setattr(trace_base, "TRACE_BYTES", 1 << 20)
    rc, _, err = cli(capsys, *SIM, "--history", history)
    assert rc == 2
    one_error_line(err, "--history", "past.csv", "larger than the 1 MiB limit")
    monkeypatch.setattr(trace_base, "TRACE_BYTES", 4 << 20)
    rc, _, err = cli(capsys, *SIM, "--history", history)
    assert rc == 0, err


# -- outputs that are not regular files -----------------------------------------------------------
OUTPUTS = [
    ("--json", lambda p: SIM + ["--json", p]),
    ("--jobs-csv", lambda p: SIM + ["--jobs-csv", p]),
    ("--out", lambda p: ["trace", "generate", "--jobs", 3, "--out", p]),
    ("--out", lambda p: ["calibrate", "--profiles", ROOT / "deepshare" / "data" / "profiles", "--out", p]),
    ("--json", lambda p: ["trace", "stats", SMALL, "--json", p]),
]


@pytest.mark.parametrize("kind", ["device", "fifo", "socket"])
def test_outputs_never_replace_a_device_fifo_or_socket(capsys, nodes, kind) -> None:
    if kind not in nodes:
        pytest.skip("mknod needs root")
    node = nodes[kind]
    before = fingerprint(node)
    name = {"device": "a character device", "fifo": "a FIFO", "socket": "a socket"}[kind]
    for flag, make in OUTPUTS:
        rc, out, err = run_promptly(capsys, *make(node), seconds=60)
        assert (rc, out) == (2, ""), (flag, err)
        one_error_line(err, f"{flag} {node}: cannot write output: is {name}, not a regular file")
        assert fingerprint(node) == before  # the very same node, not a regular file put in its place
    assert sorted(p.name for p in node.parent.iterdir()) == sorted(p.name for p in nodes.values())


# -- unusable paths -------------------------------------------------------------------------------
def test_a_5000_character_name_is_one_line_for_inputs_and_outputs(capsys, tmp_path) -> None:
    long = tmp_path / LONG_NAME
    cases = [
        (["simulate", "--trace", long, "--policy", "las+spread"], f"{long}: cannot read trace file: File name too long"),
        (SIM + ["--history", long], f"--history: {long}: cannot read trace file: File name too long"),
        (["trace", "stats", long], "File name too long"),
        (SIM + ["--json", long], f"--json {long}: cannot write output: File name too long"),
        (SIM + ["--jobs-csv", long], f"--jobs-csv {long}: cannot write output: File name too long"),
        (["trace", "generate", "--jobs", 3, "--out", long], f"--out {long}: cannot write output: File name too long"),
        (["evaluate", "--suite", long], "File name too long"),
        (["calibrate", "--from-state", long], "File name too long"),
    ]
    for argv, needle in cases:
        rc, out, err = cli(capsys, *argv)
        assert (rc, out) == (2, ""), (argv[:3], err[-300:])
        one_error_line(err, needle)


def test_a_path_through_a_regular_file_is_one_line(capsys, tmp_path) -> None:
    regular = tmp_path / "reg"
    regular.write_text("x")
    for argv, needle in (
        (["simulate", "--trace", regular / "t.csv", "--policy", "las+spread"], "cannot read trace file: Not a directory"),
        (SIM + ["--cluster", regular / "c.yaml"], "cannot read cluster spec: Not a directory"),
        (SIM + ["--json", regular / "r.json"], f"--json {regular / 'r.json'}: cannot write output: Not a directory"),
        (SIM + ["--jobs-csv", regular / "j.csv"], f"--jobs-csv {regular / 'j.csv'}: cannot write output: Not a directory"),
    ):
        rc, out, err = cli(capsys, *argv)
        assert (rc, out) == (2, ""), err
        one_error_line(err, needle)
    assert regular.read_text() == "x"


def test_a_stray_path_oserror_is_still_one_line(capsys, monkeypatch) -> None:
    """The safety net in ``main``: a path error that a reader failed to convert is exit 2, one
    line; any other OSError is not an input error and still propagates."""

    def too_long(args, out, err):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), "x" * 300)

    def disk_full(args, out, err):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "somewhere")

    monkeypatch.setattr(trace_cli, "cmd_trace_stats", too_long)  # main builds its parser afresh
    rc, _, err = cli(capsys, "trace", "stats", SMALL)
    assert rc == 2
    one_error_line(err, "x" * 300 + ": File name too long")
    monkeypatch.setattr(trace_cli, "cmd_trace_stats", disk_full)
    with pytest.raises(OSError):
        cli(capsys, "trace", "stats", SMALL)


# -- what still works -----------------------------------------------------------------------------
def test_regular_files_symlinks_and_json_dash_still_work(capsys, tmp_path) -> None:
    link = tmp_path / "t.csv"
    link.symlink_to(SMALL)
    rc, out, err = cli(capsys, "trace", "stats", link, "--json", "-")
    assert (rc, err) == (0, "")
    assert json.loads(out)["jobs"] == 4
    report = tmp_path / "r.json"
    report.write_text("old\n")  # an existing regular file is replaced, as documented
    rc, _, err = cli(capsys, *SIM, "--json", report, "--jobs-csv", tmp_path / "jobs.csv")
    assert rc == 0, err
    assert json.loads(report.read_text())["jobs"] == 4
    assert (tmp_path / "jobs.csv").read_text().startswith("job_id,")
