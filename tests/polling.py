"""Waiting in tests for something another process or a Ray actor does: poll, then fail by name."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0, every: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy and return that; after ``timeout``
    seconds fail the test naming ``what``. Generous by default: a loaded machine is slow."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return value
