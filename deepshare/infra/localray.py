"""Start a private, loopback-only Ray instance for a command that needs one for itself.

``deepshare serve`` and ``deepshare train`` without ``--address`` start Ray on this machine.
Left to itself, Ray picks the machine's routable address, and its GCS, raylet, workers and
dashboard agent listen on every interface: anyone on the network could submit work to them.
Ray resolves ``127.0.0.1`` given as ``_node_ip_address`` back to the routable address, so the
switch that works is the one Ray uses on laptops: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes
the node's address the loopback one, and every process of the instance (which inherits the
environment) binds to it. Joining a cluster (``--address``) is not affected.

:func:`resolve_loopback_as_self` is the half of the switch that a driver needs on its own when it
connects to loopback-only nodes someone else started (``scheduler start --local``).
"""

from __future__ import annotations

import os
from typing import Any

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch (read when ``ray`` is imported): "0" = a single-machine instance on loopback."""


def resolve_loopback_as_self() -> None:
    """Make this process resolve ``127.0.0.1`` as itself, not as the machine's network IP.

    Ray's ``get_node_ip_address`` answers the loopback address when single-machine mode is on
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read once at import); the constant is set on the
    module because Ray may already be imported. Child processes are not affected.
    """
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def init_local_ray(**kwargs: Any) -> None:
    """``ray.init(**kwargs)`` for a new instance on this machine, listening on 127.0.0.1 only."""
    os.environ[LOOPBACK_ENV] = "0"  # for the instance's processes, which inherit it
    import ray

    resolve_loopback_as_self()
    ray.init(**kwargs)
