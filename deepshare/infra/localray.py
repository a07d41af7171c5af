"""Start a private, loopback-only Ray instance for a command that needs one for itself.

``deepshare serve`` and ``deepshare train`` without ``--address`` start Ray on this machine.

*Private*: ``ray.init(address="local")`` always starts a new instance. Without an address Ray
looks for one to join first (``$RAY_ADDRESS``, then the address ``ray start`` wrote to
``<ray temp dir>/ray_current_cluster``), so with a cluster already running on the machine the
command failed ("num_cpus and num_gpus must not be provided") or attached to that cluster.

*Loopback-only*: left to itself, Ray picks the machine's routable address, and its GCS, raylet,
workers and dashboard agent listen on every interface: anyone on the network could submit work
to them. Ray's public API has no way to keep them on loopback: ``_node_ip_address`` (itself a
hidden option) resolves ``127.0.0.1`` back to the routable address. The switch that works is the
one Ray uses on laptops, the environment variable ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: the
node's address becomes the loopback one, and every process of the instance (which inherits the
environment) binds to it. Ray reads it once at import, so this process also sets the constant it
was read into (:func:`resolve_loopback_as_self`, through
:func:`deepshare.infra.raycompat.single_machine_mode_in_this_process`, which fails with one line
on a Ray it was not verified on). Joining a cluster (``--address``) is not affected.

:func:`resolve_loopback_as_self` is the half of the switch that a driver needs on its own when it
connects to loopback-only nodes someone else started (``scheduler start --local``).
"""

from __future__ import annotations

import os
from typing import Any

from deepshare.infra.raycompat import single_machine_mode_in_this_process

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch (read when ``ray`` is imported): "0" = a single-machine instance on loopback."""


def resolve_loopback_as_self() -> None:
    """Make this process resolve ``127.0.0.1`` as itself, not as the machine's network IP.

    Ray's ``get_node_ip_address`` answers the loopback address when single-machine mode is on
    (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read once at import); the constant is set on the
    module because Ray may already be imported. Child processes are not affected.
    """
    single_machine_mode_in_this_process()


def init_local_ray(**kwargs: Any) -> None:
    """``ray.init(address="local", **kwargs)``: a new instance on this machine, listening on
    127.0.0.1 only, whatever other Ray runs here or ``$RAY_ADDRESS`` names."""
    os.environ[LOOPBACK_ENV] = "0"  # for the instance's processes, which inherit it
    import ray

    resolve_loopback_as_self()
    ray.init(address="local", **kwargs)
