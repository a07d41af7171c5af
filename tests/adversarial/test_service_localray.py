"""Private Ray instances listen on loopback: ``train`` without ``--address`` starts its instance
through :func:`init_local_ray` (whose sockets ``test_service_http`` checks on a real ``serve``)."""

from __future__ import annotations

import os

import deepshare.infra.localray as localray
from deepshare.infra import raycompat


def test_train_without_address_starts_a_loopback_instance(monkeypatch, no_ray):
    from deepshare.rl import train

    calls = []
    monkeypatch.setattr(localray, "init_local_ray", lambda **kwargs: calls.append(kwargs))
    train.start_ray(None)
    assert len(calls) == 1 and calls[0]["include_dashboard"] is False


def test_init_local_ray_sets_rays_single_machine_switch(monkeypatch):
    import ray
    from ray.util import get_node_ip_address

    seen = {}
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs, ip=get_node_ip_address()))
    monkeypatch.setattr(raycompat.ray_constants_module(), "ENABLE_RAY_CLUSTER", True)
    monkeypatch.setenv(localray.LOOPBACK_ENV, "1")  # restored (to absent) after the test
    localray.init_local_ray(num_cpus=1)
    assert seen == {"address": "local", "num_cpus": 1, "ip": "127.0.0.1"}
    assert os.environ[localray.LOOPBACK_ENV] == "0"  # inherited by the instance's processes


def test_resolve_loopback_as_self_is_for_this_process_only(monkeypatch):
    """The half ``scheduler start --local`` uses: the driver resolves 127.0.0.1 as itself, and the
    environment its children inherit is left as it was."""
    from ray.util import get_node_ip_address

    monkeypatch.setattr(raycompat.ray_constants_module(), "ENABLE_RAY_CLUSTER", True)
    monkeypatch.delenv(localray.LOOPBACK_ENV, raising=False)
    localray.resolve_loopback_as_self()
    assert get_node_ip_address() == "127.0.0.1"
    assert localray.LOOPBACK_ENV not in os.environ
