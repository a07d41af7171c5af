"""What the launcher removes when a run ends or a launch fails, with Ray's calls stood in for."""

from __future__ import annotations

import pytest
import ray.util

from deepshare.runtime import launcher
from deepshare.runtime.runnames import RunNames

NAMES = RunNames("0123456789ab")


class Group:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture
def groups(monkeypatch):
    """Ray's registered placement groups by name; removing one may be made to fail."""
    registered: dict[str, Group] = {}
    failing: list[BaseException] = []

    def get(name):
        if name not in registered:
            raise ValueError(f"Failed to look up placement group with name: {name}")
        return registered[name]

    def remove(group):
        if failing:
            raise failing[0]
        registered.pop(group.name, None)

    monkeypatch.setattr(ray.util, "get_placement_group", get)
    monkeypatch.setattr(ray.util, "remove_placement_group", remove)
    return registered, failing


def test_a_teardown_that_cannot_remove_the_group_raises_so_the_run_stays_open(groups):
    """A teardown that swallowed Ray's error let the loop end a run whose group still held its
    GPUs, with nothing left to retry the removal."""
    registered, failing = groups
    registered[NAMES.pg("t-1", 1)] = Group(NAMES.pg("t-1", 1))
    failing.append(ConnectionError("GCS unreachable"))
    with pytest.raises(ConnectionError):
        launcher.teardown("t-1", 1, 0, names=NAMES)
    failing.clear()
    launcher.teardown("t-1", 1, 0, names=NAMES)  # the next tick's try removes it
    launcher.teardown("t-1", 1, 0, names=NAMES)  # and again: nothing left, idempotent
    assert not registered


def test_a_failed_launch_removes_the_group_ray_registered_before_raising_but_never_anothers(groups):
    registered, _ = groups
    mine = NAMES.pg("t-1", 1)
    registered[mine] = Group(mine)  # placement_group() timed out after Ray had registered it
    assert launcher._own_group(None, TimeoutError("timed out"), "t-1", 1, NAMES) is registered[mine]
    # the name was taken: whatever holds it is not this call's
    assert launcher._own_group(None, ValueError(f"name '{mine}' already exists"), "t-1", 1, NAMES) is None
    # a handle this call holds is the group, and nothing registered is no group
    handle = Group("handle")
    assert launcher._own_group(handle, TimeoutError(), "t-1", 1, NAMES) is handle
    assert launcher._own_group(None, TimeoutError(), "t-2", 1, NAMES) is None
    launcher._remove([], launcher._own_group(None, TimeoutError(), "t-1", 1, NAMES))
    assert not registered
