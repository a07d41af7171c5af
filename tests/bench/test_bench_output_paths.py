"""bench/learned_contention.py --raw and bench/distill_tree.py --json: an unusable output path is
refused in one line before the run (it was a traceback after the whole run), and a missing
folder is created when the file is written, as Record's --json does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("script, flag, other", [
    ("learned_contention.py", "--raw", ["--suite", "no-such-suite"]),
    ("distill_tree.py", "--json", ["--suite", "no-such-suite"]),
])
def test_an_unusable_output_path_is_refused_before_the_run(tmp_path, script, flag, other):
    (tmp_path / "file").write_text("")
    bad = str(tmp_path / "file" / "out.json")  # through a regular file: never writable
    done = subprocess.run([sys.executable, str(BENCH / script), *other, flag, bad],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {flag} {bad}: cannot write the results: ")


def test_a_missing_folder_is_created_when_the_output_is_written(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from record import check_output, write_output

    path = tmp_path / "new" / "deeper" / "raw.json"
    check_output(str(path), "--raw")
    write_output(str(path), "{}\n", "the raw results")
    assert path.read_text() == "{}\n"
