"""The journal fixtures the runtime's journal tests share: a journal on a clock the test moves."""

from __future__ import annotations

import pytest

from deepshare.runtime.journal import Journal


class Clock:
    """The journal's clock: moves only when a test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(tmp_path, clock):  # type: ignore[no-untyped-def]
    j = Journal(tmp_path / "state", clock=clock)
    yield j
    j.close()
