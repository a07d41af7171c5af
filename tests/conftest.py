"""Fixtures shared by the test modules: a session-wide local Ray, and the switch for tests that
need a process not connected to Ray. Starting Ray goes through ``raytools`` (longer start-up
waits, one retry). Modules that need their own Ray (other resources, a multi-node cluster) start
it in a module-scoped fixture with ``raytools.start_cluster``; since one process holds one Ray
connection, those shut down whatever is connected first, and the shared instance is started
again by the next module that asks for it.

``tests/`` is on ``sys.path`` under pytest (rootdir-relative imports), so test modules import
helpers as ``from raytools import ...``, ``from cli_run import cli``.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Iterator

import pytest


def _hypothesis_profiles() -> None:
    """``ci`` (chosen when ``$CI`` is set): no per-example deadline (a loaded machine runs an
    example 10x slower now and then) and derandomised, so a CI failure replays as it failed.
    ``dev`` (``HYPOTHESIS_PROFILE=dev``): 20 examples for the tests that do not set their own
    count, for a quick local loop. Otherwise hypothesis' defaults under each test's settings."""
    import os

    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # pragma: no cover - hypothesis is a dev dependency
        return
    settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("dev", max_examples=20, deadline=None)
    chosen = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else None)
    if chosen:
        settings.load_profile(chosen)


_hypothesis_profiles()


RAY_FIXTURES = ("ray_local", "fake_cluster")
"""Fixtures that start Ray: a test using one is marked ``slow`` whether or not its module says so."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in RAY_FIXTURES):
            item.add_marker(pytest.mark.slow)


class SharedRay:
    """The session's local Ray (``raytools.LOCAL_RAY`` in its own ``$RAY_TMPDIR``), started on
    first use and again after a module with its own Ray disconnected this process."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._tmp: str | None = None

    def ensure(self) -> None:
        import ray

        from raytools import ray_tmpdir, start_ray

        if ray.is_initialized():
            return
        if self._tmp is None:
            self._tmp = self._stack.enter_context(ray_tmpdir("ds-session-"))
        start_ray()


@pytest.fixture(scope="session")
def _shared_ray() -> Iterator[SharedRay]:
    pytest.importorskip("ray")
    with ExitStack() as stack:
        shared = SharedRay(stack)
        try:
            yield shared
        finally:
            import ray

            ray.shutdown()


@pytest.fixture(scope="module")
def ray_local(_shared_ray: SharedRay) -> None:
    """This process connected to the session's local Ray (2 CPUs, no dashboard, loopback only)."""
    _shared_ray.ensure()


@pytest.fixture
def no_ray() -> None:
    """This process not connected to Ray: disconnects from the shared instance if it was (the
    next ``ray_local`` user starts it again)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def fake_cluster() -> Iterator[object]:
    """A fake multi-node Ray cluster as ``deepshare cluster fake`` starts it (a head with no CPUs,
    1-CPU workers with the pcie and nvlink fabric resources), in its own ``$RAY_TMPDIR``; this
    process is not connected to it (the code under test joins it by address)."""
    ray = pytest.importorskip("ray")
    from raytools import ray_tmpdir, stop_cluster, with_retry

    from deepshare.raycluster.fakecluster import FakeNode, start_fake_cluster

    ray.shutdown()  # one connection per process; the shared instance restarts on its next use
    started: list[object] = []

    def start() -> object:
        started[:] = [start_fake_cluster([FakeNode(cpus=1, fabric="pcie"), FakeNode(cpus=1, fabric="nvlink")])]
        return started[0]

    with ray_tmpdir("ds-fake-"):
        cluster = with_retry("a fake Ray cluster", start, lambda: started and stop_cluster(started[0]))
        try:
            yield cluster
        finally:
            stop_cluster(cluster)  # stops only the processes this cluster started
