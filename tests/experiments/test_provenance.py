"""The commit stamped into a run's JSON is the package's own checkout's, and a package (or a
benchmark, a training or service config) with a new, untracked file is dirty: a figure must not
claim a commit its code did not come from. The commit is read again when the results are written:
a checkout that changed during the run is recorded dirty."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deepshare.experiments.provenance import commit, commit_at_write, commit_label, provenance_at_write

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A checkout with the package committed and ``venv/`` ignored."""
    (tmp_path / "deepshare").mkdir()
    (tmp_path / "deepshare" / "core.py").write_text("X = 1\n")
    (tmp_path / ".gitignore").write_text("venv/\n__pycache__/\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "one")
    return tmp_path


def test_a_checkout_root_is_stamped_and_an_untracked_module_of_the_package_makes_it_dirty(checkout: Path) -> None:
    sha = git(checkout, "rev-parse", "HEAD")
    assert commit(checkout) == {"sha": sha, "dirty": False}
    (checkout / "deepshare" / "__pycache__").mkdir()
    (checkout / "deepshare" / "__pycache__" / "core.pyc").write_bytes(b"")  # ignored: still clean
    (checkout / "notes.txt").write_text("outside the package\n")  # untracked outside it: still clean
    assert commit(checkout) == {"sha": sha, "dirty": False}
    (checkout / "deepshare" / "new_policy.py").write_text("DECIDE = 'different'\n")
    assert commit(checkout) == {"sha": sha, "dirty": True}


@pytest.mark.parametrize("folder", ["bench", "rllib_configs", "serve"])
def test_an_untracked_benchmark_or_config_makes_the_checkout_dirty(checkout: Path, folder: str) -> None:
    """An uncommitted bench/new.py was stamped clean: only the package's untracked files counted."""
    sha = git(checkout, "rev-parse", "HEAD")
    (checkout / folder).mkdir()
    (checkout / folder / "new.py").write_text("X = 2\n")
    assert commit(checkout) == {"sha": sha, "dirty": True}


def test_the_commit_is_read_again_when_the_results_are_written(checkout: Path) -> None:
    """The commit was read once at the start: a run during which the checkout was edited or moved
    to another commit was stamped with the start's clean commit."""
    started = commit(checkout)
    assert commit_at_write(started, checkout) == started  # unchanged: as it was
    (checkout / "deepshare" / "core.py").write_text("X = 2\n")
    assert commit_at_write(started, checkout) == {**started, "dirty": True}  # edited during the run
    git(checkout, "commit", "-qam", "two")
    moved = commit_at_write(started, checkout)
    sha = git(checkout, "rev-parse", "HEAD")
    assert moved == {"sha": started["sha"], "dirty": True, "sha_at_write": sha}  # committed during the run: moved
    assert commit_label(moved) == f"{started['sha'][:12]} (with uncommitted changes; the checkout was at {sha[:12]} when written)"
    provenance = {"date": "d", "commit": started, "machine": {"cpus": 1}}
    assert provenance_at_write(provenance, checkout) == {**provenance, "commit": moved}
    dirty_start = {"sha": sha, "dirty": True}
    assert commit_at_write(dirty_start, checkout) == dirty_start  # began dirty, now clean: stays dirty
    assert commit_at_write(None, checkout) is None


def test_a_regular_install_inside_another_checkout_has_no_commit(checkout: Path) -> None:
    site = checkout / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "deepshare").mkdir(parents=True)
    assert commit(site) is None
    assert commit(checkout / "deepshare") is None  # not the root either


def test_the_runs_own_outputs_in_a_code_folder_do_not_make_it_dirty(checkout: Path) -> None:
    """Second read: a --json written under bench/ made the run's next write dirty."""
    (checkout / "bench").mkdir()
    (checkout / "bench" / "out.json").write_text("{}")
    (checkout / "bench" / "runs").mkdir()
    (checkout / "bench" / "runs" / "a.csv").write_text("x\n")
    assert commit(checkout, outputs=[checkout / "bench" / "out.json", checkout / "bench" / "runs"])["dirty"] is False
    assert commit(checkout, outputs=[checkout / "bench" / "out.json"])["dirty"] is True  # runs/a.csv is no output
    (checkout / "bench" / "new.py").write_text("X = 2\n")
    assert commit(checkout, outputs=[checkout / "bench" / "out.json", checkout / "bench" / "runs"])["dirty"] is True
