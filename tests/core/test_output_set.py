""":class:`OutputSet`: a command's outputs staged beside their targets and put in place together;
every failure (before or during the renames, Ctrl-C included) leaves the old files as they were
and no temporary file behind."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import deepshare.core.output_set as output_set
from deepshare.core.errors import DeepShareError
from deepshare.core.jobs_csv import JobsCsvStream
from deepshare.core.output_set import OutputSet


def files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in folder.iterdir()}


def test_commit_puts_every_output_in_place_and_then_runs_the_actions(tmp_path):
    (tmp_path / "a.json").write_text("old a")
    said = []
    with OutputSet() as outputs:
        outputs.add_text(tmp_path / "a.json", "new a")
        outputs.add_bytes(tmp_path / "b.png", b"new b")
        stream = outputs.add_stream(JobsCsvStream(tmp_path / "c.csv"))
        outputs.after_commit(lambda: said.append(files(tmp_path)))
        assert files(tmp_path)["a.json"] == "old a" and "b.png" not in files(tmp_path)  # staged only
        assert stream.held == 0
        assert outputs.commit() == [tmp_path / "a.json", tmp_path / "b.png", tmp_path / "c.csv"]
    assert set(files(tmp_path)) == {"a.json", "b.png", "c.csv"}
    assert files(tmp_path)["a.json"] == "new a"
    assert said == [files(tmp_path)]  # after the renames, once


@pytest.mark.parametrize("error", [RuntimeError("report"), KeyboardInterrupt()])
def test_leaving_the_block_without_commit_discards_everything(tmp_path, error):
    (tmp_path / "a.json").write_text("old a")
    said = []
    with pytest.raises(type(error)):
        with OutputSet() as outputs:
            outputs.add_text(tmp_path / "a.json", "new a")
            outputs.add_stream(JobsCsvStream(tmp_path / "c.csv"))
            outputs.after_commit(lambda: said.append(True))
            raise error
    assert files(tmp_path) == {"a.json": "old a"} and said == []


def test_a_second_output_that_cannot_be_staged_removes_the_first(tmp_path, monkeypatch):
    real = output_set.stage_bytes

    def disk_full(path, data, what):  # type: ignore[no-untyped-def]
        if Path(path).name == "b.png":
            raise DeepShareError(f"{path}: cannot write {what}: No space left on device")
        return real(path, data, what)

    monkeypatch.setattr(output_set, "stage_bytes", disk_full)
    with pytest.raises(DeepShareError, match="No space"):
        with OutputSet() as outputs:
            outputs.add_text(tmp_path / "a.json", "new a")
            outputs.add_bytes(tmp_path / "b.png", b"new b")
    assert files(tmp_path) == {}


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_rename_that_fails_puts_back_the_outputs_renamed_before_it(tmp_path, monkeypatch, error):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "c.csv").write_text("old c")
    real, failed = os.replace, []

    def replace(src, dst):  # type: ignore[no-untyped-def]
        if Path(dst).name == "c.csv" and not failed:  # the commit's rename; putting the old file back works
            failed.append(dst)
            raise error
        real(src, dst)

    monkeypatch.setattr(output_set.os, "replace", replace)
    with pytest.raises(DeepShareError if isinstance(error, OSError) else KeyboardInterrupt):
        with OutputSet() as outputs:
            outputs.add_text(tmp_path / "a.json", "new a")
            outputs.add_text(tmp_path / "b.new", "new b")
            outputs.add_text(tmp_path / "c.csv", "new c")
            outputs.commit()
    monkeypatch.undo()
    assert files(tmp_path) == {"a.json": "old a", "c.csv": "old c"}  # a put back, b removed, no backup left


def test_a_finished_set_takes_nothing_more(tmp_path):
    outputs = OutputSet()
    outputs.commit()
    with pytest.raises(DeepShareError):
        outputs.add_text(tmp_path / "a.json", "late")
    assert files(tmp_path) == {}


LATER = time.time() + 86400.0
"""The sweep's clock in these tests. A file's age counts from the later of its mtime and ctime,
and a ctime cannot be set back: so the clock is moved a day on and a file "SECONDS old" is given
the mtime LATER - SECONDS, after its ctime (now)."""


def _aged(path: Path, seconds: float) -> Path:
    if not path.exists():
        path.write_text("left")
    os.utime(path, (LATER - seconds, LATER - seconds))
    return path


@pytest.fixture
def later(monkeypatch):  # type: ignore[no-untyped-def]
    """A commit's sweep reading the clock LATER."""
    monkeypatch.setattr(output_set, "time", SimpleNamespace(time=lambda: LATER))


def test_the_sweep_removes_only_its_own_stale_leftovers_of_those_targets(tmp_path):
    """Review: a process killed between the renames left hidden ``.NAME.<random>.tmp`` and
    ``.NAME.<hex>.old`` files nobody removed. The next write of the same targets removes them, and
    nothing else: not another target's, not a name of another making, not a fresh one (another
    run's, still being written), not a folder, not a file in ``keep``."""
    target = tmp_path / "a.json"
    gone = [_aged(tmp_path / ".a.json.ab_12xyz.tmp", 7200), _aged(tmp_path / ".a.json.0123456789ab.old", 120)]
    kept = [
        _aged(tmp_path / ".a.json.cd_34xyz.tmp", 600),  # younger than an hour: maybe another run's
        _aged(tmp_path / ".a.json.0123456789ac.old", 10),  # a backup of a commit under way
        _aged(tmp_path / ".b.json.ab_12xyz.tmp", 7200),  # another target's
        _aged(tmp_path / ".a.json.abc.tmp", 7200),  # not mkstemp's 8 characters
        _aged(tmp_path / ".a.json.ABCDEFGH.tmp", 7200),  # not mkstemp's alphabet
        _aged(tmp_path / ".a.json.ab_12xyz.tmp.bak", 7200),
        _aged(tmp_path / "a.json", 7200),  # the target itself
        _aged(tmp_path / ".a.json.kept0000.tmp", 7200),  # in keep
    ]
    (tmp_path / ".a.json.dir00000.tmp").mkdir()
    os.utime(tmp_path / ".a.json.dir00000.tmp", (0, 0))
    long = tmp_path / ("x" * 60 + ".json")  # its prefix is cut to 50 characters: shared, never swept
    kept.append(_aged(tmp_path / f".{long.name[:50]}.ab_12xyz.tmp", 7200))
    removed = output_set.sweep_stale([target, long], keep={tmp_path / ".a.json.kept0000.tmp"}, now=LATER)
    assert sorted(removed) == sorted(gone)
    assert all(not p.exists() for p in gone) and all(p.exists() for p in kept)
    assert (tmp_path / ".a.json.dir00000.tmp").is_dir()


def test_a_commit_sweeps_the_leftovers_of_a_killed_write_of_its_targets(tmp_path, later):
    (tmp_path / "a.json").write_text("old a")
    stale = [_aged(tmp_path / ".a.json.ab_12xyz.tmp", 7200), _aged(tmp_path / ".b.png.0123456789ab.old", 120)]
    with OutputSet() as outputs:
        outputs.add_text(tmp_path / "a.json", "new a")
        outputs.add_bytes(tmp_path / "b.png", b"new b")
        outputs.commit()
    assert files(tmp_path) == {"a.json": "new a", "b.png": "new b"}
    assert not any(p.exists() for p in stale)


def test_a_live_streams_temporary_file_survives_another_commits_sweep_however_old(tmp_path, later):
    """Second read: a ``--jobs-csv`` stream may hold its rows in memory for hours, so its file's
    times stay at its making; a concurrent commit of the same target swept it as a killed run's,
    and the stream then failed at its own commit. The stream holds a lock the sweep respects; once
    the writer is gone (closed without committing, as a kill leaves it), the file is swept."""
    target = tmp_path / "jobs.csv"
    stream = JobsCsvStream(target)
    _aged(Path(stream._tmp), 7200)
    with OutputSet() as outputs:  # another run writing the same target meanwhile
        outputs.add_text(target, "the other run's")
        outputs.commit()
    assert Path(stream._tmp).exists()
    assert stream.finish() == Path(stream._tmp)
    stream.discard()
    orphan = tmp_path / ".jobs.csv.ab_12xyz.tmp"
    with open(orphan, "w") as fh:  # a killed stream's: its lock went with its process
        output_set.hold_temp(fh.fileno())
    _aged(orphan, 7200)
    assert output_set.sweep_stale([target], now=LATER) == [orphan]


KILLED = """
import os, sys
import deepshare.core.output_set as oset
real, calls = os.replace, []
def replace(a, b, *args, **kwargs):
    calls.append(b)
    if len(calls) == 2:
        os._exit(137)  # killed between the policy file's rename and the card's
    return real(a, b, *args, **kwargs)
oset.os.replace = replace
from deepshare.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_export_killed_between_its_renames_is_found_out_and_swept_by_the_next_export(tmp_path, monkeypatch):
    """Two renames cannot be atomic: a kill between them leaves the new card beside the old policy
    file (the card is renamed first: new weights beside an old or no card passed unseen). The card's
    SHA-256 finds that out, and the next export of the same file removes the hidden files the kill left."""
    import subprocess
    import sys

    from deepshare.policies.checkpoint import SHIPPED_BASE
    from deepshare.policies.policy_card import card_path, check_card, read_card, shipped_folder

    out = tmp_path / "out.pt"
    flags = ["--out", str(out), "--kind", "hybrid", "--commit", "0123abc"]
    source = str(shipped_folder() / SHIPPED_BASE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    from deepshare.cli import main

    assert main(["export-policy", source, *flags, "--hybrid-rules", "min_ratio=0.9"]) == 0
    old_card, old_weights = card_path(out).read_text(), out.read_bytes()
    killed = subprocess.run([sys.executable, "-c", KILLED, "export-policy", source, *flags,
                             "--hybrid-rules", "min_ratio=0.7"], env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == 137, killed.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert card_path(out).read_text() != old_card and out.read_bytes() == old_weights and left  # new card, old weights
    assert any(p.startswith("weights_sha256") for p in check_card(read_card(card_path(out)), out))
    for name in left:
        _aged(tmp_path / name, 7200) if name.endswith(".tmp") else _aged(tmp_path / name, 120)
    monkeypatch.setattr(output_set, "time", SimpleNamespace(time=lambda: LATER))
    assert main(["export-policy", source, *flags, "--hybrid-rules", "min_ratio=0.7"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.card.yaml", "out.pt"]
    assert check_card(read_card(card_path(out)), out) == []


def test_a_fresh_backup_of_an_old_target_is_not_stale(tmp_path):
    """Review: a backup is a hard link, so its mtime is its target's last write: a backup of a file
    written five minutes ago counted as stale the moment it was made, and another commit's sweep
    could remove it mid-commit. Its age counts from its making (its ctime)."""
    target = tmp_path / "policy.pt"
    target.write_bytes(b"old weights")
    os.utime(target, (time.time() - 300, time.time() - 300))
    backup = output_set._backup(target)  # a concurrent commit's backup, made now
    assert backup is not None and os.path.getmtime(backup) < time.time() - 240
    assert output_set.sweep_stale([target]) == [] and backup.exists()
    assert output_set.sweep_stale([target], now=time.time() + 30) == [] and backup.exists()
    assert output_set.sweep_stale([target], now=time.time() + 120) == [backup]  # left by a kill, a minute on


def test_keep_protects_a_temporary_file_named_relative_or_absolute(tmp_path, monkeypatch, later):
    """Review: ``keep`` held mkstemp's absolute paths while the sweep built ``folder / name`` from a
    relative ``--out``: a commit more than an hour after staging removed its own temporary file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    target = Path("d/out.json")
    tmp = output_set.stage_bytes(target, b"x", "file")
    assert output_set.sweep_stale([target], keep={tmp}, now=LATER) == [] and tmp.exists()  # as mkstemp gave it
    assert output_set.sweep_stale([target], keep={tmp.resolve()}, now=LATER) == [] and tmp.exists()
    assert output_set.sweep_stale([target], keep={Path("d") / tmp.name}, now=LATER) == [] and tmp.exists()
    os.unlink(tmp)
    with OutputSet() as outputs:  # the whole commit, its sweep reading the clock a day on
        outputs.add_text(target, "new")
        outputs.add_text("top.json", "new top")
        assert outputs.commit() == [target, Path("top.json")]
    assert files(tmp_path / "d") == {"out.json": "new"} and (tmp_path / "top.json").read_text() == "new top"


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(5, "Input/output error")])
def test_an_interrupted_or_failing_sweep(tmp_path, monkeypatch, error):
    """Review: the sweep ran outside the try that discards: Ctrl-C while it scanned left every
    temporary file of the set behind. Now Ctrl-C discards the set (the targets as they were, no
    temporary file), and an OSError from the sweep does not fail the commit."""
    (tmp_path / "a.json").write_text("old a")
    stale = _aged(tmp_path / ".a.json.ab_12xyz.tmp", 7200)

    def scan(path):  # type: ignore[no-untyped-def]
        raise error

    monkeypatch.setattr(output_set.os, "scandir", scan)
    said = []
    with OutputSet() as outputs:
        outputs.add_text(tmp_path / "a.json", "new a")
        outputs.add_bytes(tmp_path / "b.png", b"new b")
        outputs.after_commit(lambda: said.append(True))
        if isinstance(error, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                outputs.commit()
        else:
            outputs.commit()
    monkeypatch.undo()
    if isinstance(error, KeyboardInterrupt):
        assert files(tmp_path) == {"a.json": "old a", stale.name: "left"} and said == []
    else:
        assert files(tmp_path) == {"a.json": "new a", "b.png": "new b", stale.name: "left"} and said == [True]


def test_a_sweep_that_raises_os_error_does_not_fail_the_commit(tmp_path, monkeypatch):
    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(output_set, "sweep_stale", broken)
    with OutputSet() as outputs:
        outputs.add_text(tmp_path / "a.json", "new a")
        outputs.commit()
    assert files(tmp_path) == {"a.json": "new a"}
