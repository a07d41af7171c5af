"""Starting Ray in tests so that a busy machine does not error them: one place for the temp
folder, the start-up timeouts and a single retry.

On a loaded 2-core box a node can miss one of Ray's start-up deadlines (the raylet's fixed 30 s
registration wait, the GCS port wait, ``Cluster``'s 30 s node waits) and the whole module errors.
Every Ray start in the tests goes through :func:`start_ray` or :func:`start_cluster`: the waits
we can set are :data:`STARTUP_TIMEOUT_S`, and a start that fails anyway is shut down and tried
once more. Modules that need an isolated Ray (own resources, own multi-node cluster) call these
from their own module-scoped fixture; the rest share ``conftest.py``'s session instance.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import pytest

from deepshare.infra.raycompat import GCS_PORT_WAIT_ENV

STARTUP_TIMEOUT_S = 120
"""Seconds each start-up wait we can set may take (Ray's defaults are 30 s)."""

ATTEMPTS = 2
"""One start and, if it fails, one retry after shutting down what the first one left."""

LOCAL_RAY = dict(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=150 * 1024**2)
"""``ray.init`` arguments of a local test instance: two CPUs, no dashboard, a small object store."""

T = TypeVar("T")


@contextmanager
def ray_tmpdir(prefix: str = "ds-ray-") -> Iterator[str]:
    """A fresh ``$RAY_TMPDIR`` (short: Ray's socket paths must stay < 108 bytes) and the longer
    GCS port wait for the Ray processes started inside; both undone and the folder removed after."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_TMPDIR", tmp)
    mp.setenv(GCS_PORT_WAIT_ENV, str(STARTUP_TIMEOUT_S))
    try:
        yield tmp
    finally:
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)


def with_retry(what: str, start: Callable[[], T], stop: Callable[[], None], attempts: int = ATTEMPTS) -> T:
    """``start()``; if it raises, ``stop()`` (best effort) and start again, up to ``attempts`` in all."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:  # noqa: BLE001 - Ray's start-up raises many types
            try:
                stop()
            except Exception:  # noqa: BLE001 - cleaning up a half-started Ray
                pass
            if attempt == attempts:
                raise
            warnings.warn(f"{what} did not start ({type(exc).__name__}: {exc}); retrying", stacklevel=2)
    raise AssertionError("unreachable")


def start_ray(**init_kwargs: Any) -> None:
    """A new loopback-only local Ray for this process (:data:`LOCAL_RAY` updated by ``init_kwargs``),
    through ``deepshare.infra.localray.init_local_ray`` as ``train`` and ``serve`` start theirs."""
    import ray

    from deepshare.infra.localray import LOOPBACK_ENV, init_local_ray

    kwargs = {**LOCAL_RAY, **init_kwargs}
    mp = pytest.MonkeyPatch()
    mp.delenv(LOOPBACK_ENV, raising=False)  # init_local_ray sets it, for the instance's processes
    try:
        with_retry("a local Ray", lambda: init_local_ray(**kwargs), ray.shutdown)
    finally:
        mp.undo()  # the instance's processes have it; later subprocesses of the tests should not


def start_cluster(head: dict[str, Any], workers: list[dict[str, Any]], connect: dict[str, Any] | None = None) -> Any:
    """A fake multi-node ``ray.cluster_utils.Cluster``: a head with ``head`` node arguments, one worker
    per entry of ``workers``, every node waited for up to :data:`STARTUP_TIMEOUT_S`; the driver joins
    it with ``ray.init(address=..., **connect)`` unless ``connect`` is None, leaving the Ray it was
    connected to first (a process holds one connection; ``conftest``'s shared instance restarts on
    its next use). Returns the cluster; stop it with :func:`stop_cluster`. Call inside
    :func:`ray_tmpdir`."""
    import ray
    from ray.cluster_utils import Cluster

    from deepshare.infra.raycompat import wait_for_node

    if connect is not None:
        ray.shutdown()
    started: list[Any] = []

    def start() -> Any:
        cluster = Cluster(initialize_head=False)
        started[:] = [cluster]
        for args in (dict(head, include_dashboard=head.get("include_dashboard", False)), *workers):
            node = cluster.add_node(wait=False, **args)
            wait_for_node(cluster, node, STARTUP_TIMEOUT_S)  # add_node(wait=True) waits 30 s
        cluster.wait_for_nodes(timeout=STARTUP_TIMEOUT_S)
        if connect is not None:
            ray.init(address=cluster.address, **connect)
        return cluster

    def stop() -> None:
        if started:
            stop_cluster(started[0])

    return with_retry("a fake Ray cluster", start, stop)


def stop_cluster(cluster: Any) -> None:
    """Disconnect the driver and stop only the processes ``cluster`` started."""
    import ray

    ray.shutdown()
    cluster.shutdown()
