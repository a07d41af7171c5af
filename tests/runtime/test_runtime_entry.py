"""A Python entrypoint's return value as its rank's exit status (``deepshare.runtime.entry``).

The rank runs as its own process, so each case runs ``python -m deepshare.runtime.entry`` on a
module written to ``tmp_path`` and reads the process's real exit status and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ("None", 0, False),
    ("0", 0, False),
    ("3", 3, False),
    ("255", 255, False),
    ("256", 1, True),  # passed on as it was, 256 exited 0: a failure read as success
    ("-1", 1, True),
    ("True", 1, True),
    ("False", 1, True),
    ("'done'", 1, True),
    ("{'loss': 0.1}", 1, True),
]


@pytest.mark.parametrize("value, status, said", CASES, ids=[c[0] for c in CASES])
def test_the_entrypoints_return_value_is_a_documented_exit_status(tmp_path, value, status, said):
    (tmp_path / "job_mod.py").write_text(f"def main(argv):\n    return {value}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "deepshare.runtime.entry", "job_mod:main"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    lines = done.stderr.strip().splitlines()
    if said:
        assert len(lines) == 1 and "the entrypoint returned" in lines[0] and "exiting with status 1" in lines[0]
        assert "Traceback" not in done.stderr
    else:
        assert lines == []
