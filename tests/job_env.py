"""The environment a job sees without a scheduler, for the job API's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DEEPSHARE_ATTEMPT")
"""What a launcher sets: cleared, so a test sees the defaults unless it sets one."""


def job_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No launcher variables, a checkpoint folder ``tmp_path/ckpt`` and a control folder
    ``tmp_path/ctl`` (made); ``tmp_path``."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEPSHARE_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("DEEPSHARE_CONTROL_DIR", str(tmp_path / "ctl"))
    (tmp_path / "ctl").mkdir()
    return tmp_path
