""":class:`OutputSet`: a command's outputs staged beside their targets and put in place together;
every failure (before or during the renames, Ctrl-C included) leaves the old files as they were
and no temporary file behind."""

from __future__ import annotations

import os
from pathlib import Path

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
