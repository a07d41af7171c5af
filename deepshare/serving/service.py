"""The placement service as a library call: :func:`run_service` (until stopped) and
:func:`serving` (a context manager), the entry points ``deepshare serve`` calls.

Both load the policy and the contention model before Ray starts (a bad name costs no cluster
start-up), start Ray (a private loopback instance, or join ``address``), start Serve's HTTP
proxy on ``host:port`` and deploy the same application as ``serve run serve/config.yaml``
(:func:`deepshare.serving.deployment.service_app`), and shut Serve and Ray down on the way out:
the application first, so the requests in flight are answered (for at most
:func:`~deepshare.serving.deployment.drain_s`) and new ones refused, then the proxy and Ray.
A failure of Ray or Serve to start is a :class:`~deepshare.core.errors.RuntimeFailure` of one
line; bad settings are a :class:`~deepshare.core.errors.DeepShareError`.

Signals: :func:`run_service` without a ``stop`` event is a process's entry point and turns
SIGTERM and SIGINT into a clean stop (restoring the handlers it replaced when it returns). Given
a ``stop`` event (a test, a host application) it touches no signal handler.

``settings.token`` is used as given (None: no token); reading ``$DEEPSHARE_SERVE_TOKEN`` is the
caller's business (the CLI does).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from deepshare.core.errors import RuntimeFailure
from deepshare.serving.settings import ServiceSettings, check_settings  # noqa: F401 - check_settings: callers import it here too

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where a started service answers."""

    url: str
    """``http://HOST:PORT`` of Serve's proxy (the API at ``/v1/...``, the docs at ``/docs``)."""
    metrics_url: str | None
    """The private Ray instance's Prometheus endpoint; None when joined to a cluster (each node's
    metrics agent exports there)."""




@contextmanager
def serving(
    settings: ServiceSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    address: str | None = None,
    metrics_port: int | None = None,
    on_ray_started: Callable[[], None] | None = None,
) -> Iterator[Endpoint]:
    """The service, started (module doc) and running while the ``with`` block runs.

    ``address``: join that Ray cluster (``auto`` or HOST:PORT) instead of starting a private
    instance on loopback; ``metrics_port``: the private instance's metrics agent port (default:
    a free one); ``on_ray_started``: called once Ray runs, before Serve starts (where an entry
    point installs its signal handlers: ``ray.init`` installs its own over earlier ones)."""
    check_settings(settings)
    import ray
    from ray import serve

    from deepshare.infra.localray import init_local_ray
    from deepshare.serving.deployment import APP_NAME, service_app

    deployed = False
    try:
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:  # a private instance: loopback only
                init_local_ray(num_cpus=max(os.cpu_count() or 1, replicas), include_dashboard=False, log_to_driver=False,
                               **({"_metrics_export_port": metrics_port} if metrics_port else {}))
            if on_ray_started is not None:
                on_ray_started()
            serve.start(http_options={"host": host, "port": port}, logging_config={"log_level": "WARNING"})
            serve.run(service_app(settings, replicas), name=APP_NAME, route_prefix="/", blocking=False)
            deployed = True
            endpoint = Endpoint(f"http://{_url_host(host)}:{port}",
                                None if address else f"http://127.0.0.1:{_local_metrics_port()}/metrics")
        except Exception as exc:  # noqa: BLE001 - Ray's and Serve's start-up failures: one line
            where = f"Ray at --address {address}" if address else "a local Ray instance"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RuntimeFailure(f"the placement service did not start on {where} ({type(exc).__name__}: {first})") from None
        yield endpoint
    finally:
        if ray.is_initialized():
            try:
                if deployed:  # a failed start has nothing to drain (and Serve may not be up to ask)
                    _drain(serve, APP_NAME)
                serve.shutdown()
            finally:
                ray.shutdown()


def _drain(serve: Any, app: str) -> None:
    """Delete the application first: its replicas answer the requests they hold (at most
    :func:`~deepshare.serving.deployment.drain_s`) while the proxy, still up, answers new ones 404
    (no application). ``serve.shutdown`` alone stops the proxy first and drops every request in
    flight."""
    try:
        serve.delete(app)
    except Exception as exc:  # noqa: BLE001 - an app that never deployed: nothing to drain, shut down anyway
        log.warning("could not drain the placement service before stopping it (%s: %s)", type(exc).__name__, exc)


def run_service(
    settings: ServiceSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    address: str | None = None,
    metrics_port: int | None = None,
    stop: threading.Event | None = None,
    on_ready: Callable[[Endpoint], None] | None = None,
) -> None:
    """Serve until ``stop`` is set (None: until SIGTERM or SIGINT, module doc), then shut down.
    ``on_ready(endpoint)`` is called once the service answers."""
    installs = stop is None
    stop = stop or threading.Event()
    previous: dict[int, Any] = {}

    def handle_signals() -> None:
        if installs:
            previous.update({sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)})

    try:
        with serving(settings, host=host, port=port, replicas=replicas, address=address, metrics_port=metrics_port,
                     on_ray_started=handle_signals) as endpoint:
            if on_ready is not None:
                on_ready(endpoint)
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _local_metrics_port() -> int:
    import ray

    (node,) = ray.nodes()  # the private instance has one node
    return int(node["MetricsExportPort"])
