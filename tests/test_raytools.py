"""The test helpers' Ray start-up retry and temp folder (no Ray started here)."""

from __future__ import annotations

import os

import pytest
from raytools import ray_tmpdir, with_retry


def test_a_failed_start_is_stopped_and_tried_once_more():
    calls: list[str] = []

    def start() -> str:
        calls.append("start")
        if calls.count("start") == 1:
            raise TimeoutError("The current node timed out during startup.")
        return "cluster"

    with pytest.warns(UserWarning, match="did not start .*TimeoutError.*retrying"):
        assert with_retry("a test Ray", start, lambda: calls.append("stop")) == "cluster"
    assert calls == ["start", "stop", "start"]


def test_the_second_failure_is_raised_after_cleaning_up():
    calls: list[str] = []

    def start() -> None:
        calls.append("start")
        raise RuntimeError(f"attempt {calls.count('start')}")

    def stop() -> None:
        calls.append("stop")
        raise OSError("half-started processes are already gone")  # a failing clean-up does not hide the cause

    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="attempt 2"):
        with_retry("a test Ray", start, stop)
    assert calls == ["start", "stop", "start", "stop"]


def test_ray_tmpdir_sets_and_restores_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", "/before")
    monkeypatch.delenv("RAY_gcs_server_port_wait_time_s", raising=False)
    with ray_tmpdir("ds-test-") as tmp:
        assert os.environ["RAY_TMPDIR"] == tmp and os.path.isdir(tmp) and len(tmp) < 40
        assert os.environ["RAY_gcs_server_port_wait_time_s"] == "120"
    assert os.environ["RAY_TMPDIR"] == "/before" and not os.path.exists(tmp)
    assert "RAY_gcs_server_port_wait_time_s" not in os.environ
