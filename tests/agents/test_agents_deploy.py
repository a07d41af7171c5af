"""``agents start`` and ``stop`` against a monitor that hangs, dies or is not a monitor, on the
session's local Ray: one line and an exit status, never a wait for ever or a traceback."""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray")

import deepshare.cli.agents as cli  # noqa: E402
from deepshare.agents.config import NAMESPACE  # noqa: E402
from cli_run import agents_handler  # noqa: E402
from polling import wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_local")
NODE_ID = "ab" * 28


@ray.remote(num_cpus=0, max_concurrency=4)
class FakeMonitor:
    """Has the monitor's methods (so it passes for one); ``hang`` makes them sleep, ``die`` exit."""

    def __init__(self, mode: str) -> None:
        self._mode = mode

    def _act(self, value):
        if self._mode == "hang":
            time.sleep(600)
        if self._mode == "die":
            os._exit(1)
        return value

    def reconcile(self):
        return self._act([])

    def shutdown(self):
        return self._act(0)

    def view(self):
        return self._act(None)

    def agents(self):
        return self._act({})

    def config(self):
        return self._act(None)


@ray.remote(num_cpus=0)
class Other:
    def ping(self) -> int:
        return 1


def _named(cls, name: str, *args):
    """A named actor in the monitor's namespace (it lives while the handle returned is held)."""
    handle = cls.options(name=name, namespace=NAMESPACE).remote(*args)
    ray.get(handle.__ray_ready__.remote())
    return handle


def _gone(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    return False




def test_start_gives_up_on_a_monitor_that_never_reconciles(monkeypatch):
    hung = _named(FakeMonitor, "ds-test-hung-start", "hang")
    monkeypatch.setattr(cli, "START_TIMEOUT_S", 1.0)
    try:
        began = time.monotonic()
        rc, out, err = agents_handler(cli.cmd_start, name="ds-test-hung-start")
        assert time.monotonic() - began < 30
        assert rc == 1 and out == "" and err.count("\n") == 1
        assert err.startswith("deepshare: error: the contention monitor did not start (GetTimeoutError")
    finally:
        ray.kill(hung, no_restart=True)


@pytest.mark.parametrize("mode", ["hang", "die"])
def test_stop_kills_a_wedged_or_dead_monitor_and_its_agents_by_name(mode, monkeypatch):
    name = f"ds-test-{mode}-stop"
    held = [_named(FakeMonitor, name, mode), _named(Other, f"{name}-agent-{NODE_ID}"),
            _named(Other, f"{name}-agent-agent-{NODE_ID}")]  # the last: the monitor "NAME-agent"'s agent
    monkeypatch.setattr(cli, "STOP_TIMEOUT_S", 1.0, raising=False)  # (raising=False: the old code had none)
    try:
        began = time.monotonic()
        rc, out, err = agents_handler(cli.cmd_stop, name=name)
        assert time.monotonic() - began < 30
        assert rc == 0 and out == f"stopped contention monitor {name!r} and 1 agent(s)\n"
        assert err.count("\n") == 1 and err.startswith(f"deepshare: warning: the contention monitor {name!r} did not stop")
        wait_for("the monitor and its agent gone", lambda: _gone(name) and _gone(f"{name}-agent-{NODE_ID}"))
        assert not _gone(f"{name}-agent-agent-{NODE_ID}")
    finally:
        for handle in held:
            ray.kill(handle, no_restart=True)


@pytest.mark.parametrize("command", ["start", "status", "stop"])
def test_a_name_that_is_not_a_monitor_is_one_line_naming_it(command):
    other = _named(Other, "ds-test-other")
    try:
        rc, out, err = agents_handler(getattr(cli, f"cmd_{command}"), name="ds-test-other")
        assert rc == 2 and out == "" and err.count("\n") == 1
        assert err.startswith("deepshare: error: --name 'ds-test-other': the actor of that name") and "Other" in err
        assert ray.get(other.ping.remote()) == 1  # left alone
    finally:
        ray.kill(other, no_restart=True)
