"""checkpoint() runs the check installed around it, per thread, and nothing otherwise."""

from __future__ import annotations

import threading

import pytest

from deepshare.core.interrupt import checking, checkpoint


class Stop(BaseException):
    pass


def test_nothing_is_checked_without_a_check():
    checkpoint()
    with checking(None):
        checkpoint()


def test_the_installed_check_runs_and_is_removed_after_the_block():
    calls = []
    with checking(lambda: calls.append(1)):
        checkpoint()
        checkpoint()
    checkpoint()
    assert calls == [1, 1]

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        with checking(stop):
            checkpoint()
    checkpoint()  # the raising block removed its check too


def test_the_inner_check_wins_and_the_outer_comes_back():
    seen = []
    with checking(lambda: seen.append("outer")):
        with checking(lambda: seen.append("inner")):
            checkpoint()
        checkpoint()
    assert seen == ["inner", "outer"]


def test_another_thread_does_not_see_this_threads_check():
    def stop() -> None:
        raise Stop

    errors = []

    def other() -> None:
        try:
            checkpoint()
        except BaseException as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    with checking(stop):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert errors == []
