"""The commit stamped into a run's JSON is the package's own checkout's, and a package with a
new, untracked module is dirty: a figure must not claim a commit its code did not come from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deepshare.experiments.provenance import commit

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


def test_a_regular_install_inside_another_checkout_has_no_commit(checkout: Path) -> None:
    site = checkout / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "deepshare").mkdir(parents=True)
    assert commit(site) is None
    assert commit(checkout / "deepshare") is None  # not the root either
