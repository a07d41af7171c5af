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


def test_time_left_is_what_the_caller_says_inside_its_block_only():
    from deepshare.core.interrupt import time_left

    assert time_left() is None
    with checking(None, lambda: 2.5):
        assert time_left() == 2.5
        with checking(None):  # an inner caller with no bound: unbounded inside it
            assert time_left() is None
        assert time_left() == 2.5
    assert time_left() is None


def test_a_deadline_installs_its_check_and_its_time_left():
    from deepshare.core.deadline import Deadline, DecisionTimeout, bounded
    from deepshare.core.interrupt import time_left

    now = [0.0]
    deadline = Deadline(2.0, clock=lambda: now[0])
    with bounded(deadline):
        assert time_left() == 2.0
        now[0] = 1.5
        assert time_left() == 0.5
        checkpoint()
        now[0] = 2.0
        with pytest.raises(DecisionTimeout, match="no decision within 2 s"):
            checkpoint()
    with bounded(Deadline(None)):  # no deadline: nothing installed
        assert time_left() is None
        checkpoint()
