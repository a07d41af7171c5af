"""Every use of Ray's private internals, in one place: why no public API serves, and for which Ray.

DeepShare uses Ray's public API everywhere else. What is here reaches into modules Ray may change
in any release (``ray._private``, ``ray._common``, ``ray.serve._private``,
``ray.autoscaler._private``) or private attributes of public classes. Each use is one function
below, whose docstring says what it does, why no public API serves, and which Ray versions were
verified (:data:`VERIFIED_MINORS`). ``tests/test_raycompat.py`` fails when a private import or
name appears anywhere else in the package, the tests or the benchmarks (tests that patch a private
module and put it back get the module from here too).

**Failing on an unverified Ray.** ``pyproject.toml`` pins Ray to the verified minor series, so
pip refuses any other. A Ray installed past the pin (a cluster image, ``pip install --no-deps``)
meets :func:`require`: each function here checks the installed version when it is *used*, and
raises :class:`RayVersionError`, one line naming the feature, the installed Ray and the verified
series. Not at import of this module: the simulator, the policies and the CLI's other commands
never touch these internals and keep working on any Ray; and not in Ray's own processes at
random times either: the uses are at the start of the commands that need them
(``serve`` and ``train`` starting their local Ray, ``scheduler start --local``, reading a
cluster YAML or a training config) or in a Serve replica's constructor, where Serve reports the
line as the deployment's start-up error.

Importing this module imports no Ray; each function imports what it needs when called.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from deepshare.core.errors import DeepShareError

VERIFIED_MINORS: tuple[str, ...] = ("2.60",)
"""Ray ``major.minor`` series every function here was verified against (what CI runs: the
``ray`` pin in ``pyproject.toml`` allows exactly these)."""


class RayVersionError(DeepShareError):
    """The installed Ray is outside :data:`VERIFIED_MINORS` for a feature that uses its internals."""


def _installed_ray() -> str:
    import ray

    return str(ray.__version__)


@lru_cache(maxsize=None)
def _verified(version: str) -> bool:
    return ".".join(version.split(".")[:2]) in VERIFIED_MINORS


def require(feature: str, version: str | None = None) -> None:
    """Raise :class:`RayVersionError` unless the installed Ray (or ``version``) is verified."""
    version = _installed_ray() if version is None else version
    if not _verified(version):
        raise RayVersionError(
            f"{feature} uses Ray internals verified on Ray {', '.join(v + '.x' for v in VERIFIED_MINORS)} only; "
            f"this is Ray {version}: install a verified Ray (pip install 'ray=={VERIFIED_MINORS[-1]}.*')"
        )


# -- a loopback-only local Ray (deepshare.infra.localray) ----------------------------------------

def single_machine_mode_in_this_process() -> None:
    """Make this process resolve ``127.0.0.1`` as itself: ``ray._private.ray_constants.ENABLE_RAY_CLUSTER = False``.

    Why: Ray's node address is the machine's routable one, and every process of an instance
    binds to it. The only switch that keeps them on loopback is ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    (public as an environment variable, for laptops), which Ray reads *once, at import*, into
    this constant; a process where Ray is already imported must set the constant too. The hidden
    ``_node_ip_address`` option resolves ``127.0.0.1`` back to the routable address.
    Verified: Ray 2.60 (``ray/_private/ray_constants.py``, read by ``services.get_node_ip_address``).
    """
    require("a loopback-only local Ray (ray._private.ray_constants.ENABLE_RAY_CLUSTER)")
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def ray_constants_module() -> Any:
    """``ray._private.ray_constants``, the module whose ``ENABLE_RAY_CLUSTER``
    :func:`single_machine_mode_in_this_process` sets: for tests that set it back first
    (``monkeypatch.setattr(ray_constants_module(), "ENABLE_RAY_CLUSTER", True)``) and see it switched.

    Why: the switch is that private constant (see :func:`single_machine_mode_in_this_process`);
    a test of the switch has to read and restore it. Ray's public ``ray.util.get_node_ip_address``
    (the same function ``services.get_node_ip_address`` it consults) shows the effect.
    Verified: Ray 2.60.
    """
    require("Ray's single-machine switch (ray._private.ray_constants)")
    from ray._private import ray_constants

    return ray_constants


# -- the placement service's replica (deepshare.serving.deployment) ------------------------------

def serve_replica_module() -> Any:
    """``ray.serve._private.replica``, the module :func:`replica_grpc_on_loopback` patches: for
    tests that put a stand-in for its ``add_port_to_grpc_server`` (``monkeypatch.setattr``) and
    check the patch wraps it.

    Why: the patched name is a private module's global (see :func:`replica_grpc_on_loopback`).
    Verified: Ray 2.60.
    """
    require("the Serve replica module (ray.serve._private.replica)")
    from ray.serve._private import replica

    return replica


def replica_grpc_on_loopback() -> None:
    """Make this Serve replica's inter-deployment gRPC server listen on 127.0.0.1, not ``[::]``.

    A monkey-patch of ``ray.serve._private.replica.add_port_to_grpc_server`` (the name the
    replica module imported from ``ray._common.tls_utils``), idempotent; call it in the replica's
    constructor, which runs before Serve starts that server, and only on a loopback-only instance.
    Why: Serve binds the server to ``[::]:0`` (every interface) with no setting to change that,
    and it takes serialized requests straight to the replica, past the proxy and its token check.
    Verified: Ray 2.60 (``Replica._start_internal_grpc_server`` calls ``add_port_to_grpc_server(server, "[::]:0")``).
    """
    require("the service's loopback-only replica (patches ray.serve._private.replica)")
    from ray.serve._private import replica

    bind = replica.add_port_to_grpc_server
    if getattr(bind, "deepshare_loopback", False):
        return

    def loopback(server: Any, address: str) -> int:
        return bind(server, "127.0.0.1:0" if address == "[::]:0" else address)

    setattr(loopback, "deepshare_loopback", True)
    replica.add_port_to_grpc_server = loopback


# -- cluster YAMLs and node labels (deepshare.raycluster) ----------------------------------------

def node_label_syntax_check() -> Callable[[dict[str, str]], None]:
    """Ray's own node-label syntax check: ``ray._private.label_utils.validate_node_label_syntax``
    (raises ``ValueError`` with Ray's message).

    Why: Ray checks labels only when a node starts (``ray start --labels``, the autoscaler's
    node types); it has no public validator, and a cluster YAML should fail when it is read,
    with Ray's own rules, not when a node fails to start on the cloud.
    Verified: Ray 2.60.
    """
    require("checking node labels with Ray's rules (ray._private.label_utils)")
    from ray._private.label_utils import validate_node_label_syntax

    return validate_node_label_syntax


def cluster_config_prepare_and_validate() -> tuple[Callable[[dict[str, Any]], dict[str, Any]], Callable[[dict[str, Any]], None]]:
    """``ray.autoscaler._private.util.prepare_config`` and ``validate_config``: the defaults and
    checks ``ray up`` applies to a cluster launcher YAML.

    Why: the launcher has no public "validate this config" call (``ray up`` would start the
    cluster); ``deepshare`` reads the same YAML to learn the worker types, and must see it as
    Ray will (its defaults filled, its errors as Ray words them).
    Verified: Ray 2.60.
    """
    require("validating a cluster YAML with Ray's launcher rules (ray.autoscaler._private.util)")
    from ray.autoscaler._private.util import prepare_config, validate_config

    return prepare_config, validate_config


def fake_multi_node_provider() -> type:
    """``ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider``, to subclass.

    Why: the fake multi-node provider (processes on this machine acting as autoscaled nodes) is
    the only way to run Ray's real autoscaler without a cloud, and it exists only as a private
    module. ``deepshare.raycluster.fake_provider`` overrides its private
    ``_create_node_with_resources_and_labels`` and reads ``_next_node_id`` to give each node a name
    label (:func:`fake_node_number`).
    Verified: Ray 2.60.
    """
    require("the fake multi-node autoscaler provider (ray.autoscaler._private.fake_multi_node)")
    from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider

    return FakeMultiNodeProvider


def fake_node_number(provider: Any) -> int:
    """The number the fake provider gives the next node it creates (its private ``_next_node_id``, plus 1).
    Verified: Ray 2.60 (the id the parent's ``_create_node_with_resources_and_labels`` takes next)."""
    return int(provider._next_node_id) + 1


# -- RLlib (deepshare.rl.ppo_keys, deepshare.rl.module) ------------------------------------------

def rllib_deprecated_value() -> int:
    """RLlib's marker default of a deprecated ``training()`` argument: ``ray._common.deprecation.DEPRECATED_VALUE``.

    Why: RLlib marks a deprecated argument only by this default; there is no public list of the
    keys it still honours, and the valid ``ppo:`` keys are read from its signatures.
    Verified: Ray 2.60 (moved there from ``ray.rllib.utils.deprecation``, which no longer exists).
    """
    require("reading RLlib's training keys (ray._common.deprecation)")
    from ray._common.deprecation import DEPRECATED_VALUE

    return int(DEPRECATED_VALUE)


RLLIB_DEPRECATION_LOGGER = "ray._common.deprecation"
"""The logger RLlib's deprecation warnings come from (a private module's name; Ray 2.60)."""


# -- fake clusters in tests and benchmarks (tests/raytools.py, bench/suite_scale.py) -------------

def wait_for_node(cluster: Any, node: Any, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for one node of a ``ray.cluster_utils.Cluster`` to register: its
    private ``_wait_for_node``.

    Why: ``Cluster.add_node(wait=True)`` waits a fixed 30 s, too short on a loaded 2-core machine;
    the public ``wait_for_nodes(timeout)`` waits for all, after every node was added.
    Verified: Ray 2.60.
    """
    require("waiting for a fake cluster's node (ray.cluster_utils.Cluster._wait_for_node)")
    cluster._wait_for_node(node, timeout=timeout_s)


GCS_PORT_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
"""Ray's internal config flag (``RAY_<name>`` overrides ``ray_config_def.h``'s ``gcs_server_port_wait_time_s``):
how long a node waits for the GCS port; undocumented, read by the processes a node starts. Ray 2.60."""
