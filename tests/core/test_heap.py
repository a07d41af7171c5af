"""long_lived_frozen: objects alive on entry leave the collector's walks until the last exit."""

from __future__ import annotations

import gc
import threading

import pytest

from deepshare.core.heap import long_lived_frozen


def test_freezes_on_entry_and_unfreezes_on_exit() -> None:
    assert gc.get_freeze_count() == 0
    with long_lived_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_nested_uses_unfreeze_only_at_the_outermost_exit() -> None:
    with long_lived_frozen():
        with long_lived_frozen():
            pass
        assert gc.get_freeze_count() > 0, "an inner exit must not unfreeze for the outer use"
    assert gc.get_freeze_count() == 0


def test_an_exception_still_unfreezes() -> None:
    with pytest.raises(RuntimeError):
        with long_lived_frozen():
            raise RuntimeError("decision failed")
    assert gc.get_freeze_count() == 0


def test_garbage_made_inside_is_still_collected() -> None:
    class Node:
        pass

    with long_lived_frozen():
        cycle = Node()
        cycle.me = cycle  # type: ignore[attr-defined]
        del cycle
        assert gc.collect() > 0, "a cycle made during the use is collected as before"


def test_concurrent_uses_share_one_count() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with long_lived_frozen():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with long_lived_frozen():
        pass
    assert gc.get_freeze_count() > 0, "the other thread's use is still active"
    release.set()
    thread.join(10)
    assert gc.get_freeze_count() == 0


def test_a_learned_decision_is_scored_with_the_heap_frozen() -> None:
    from deepshare.policies.learned import drive

    seen = []

    def steps():  # type: ignore[no-untyped-def]
        yield {"observations": None}
        yield {"observations": None}
        return "decided"

    def scorer(obs):  # type: ignore[no-untyped-def]
        seen.append(gc.get_freeze_count())
        return None

    assert drive(steps(), scorer) == "decided"
    assert len(seen) == 2 and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0
