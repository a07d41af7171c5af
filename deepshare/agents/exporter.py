"""Prometheus endpoint for the monitor's cluster-wide view.

Metrics (all labelled ``node``; link metrics also ``link``, GPU metrics ``gpu``):

=========================================  ======= ====================================================
``deepshare_link_receive_bytes_total``     counter bytes received since the node's agent started
``deepshare_link_transmit_bytes_total``    counter bytes sent since the node's agent started
``deepshare_link_utilization_ratio``       gauge   max(rx, tx) / capacity (links with a known capacity)
``deepshare_link_contention``              gauge   contention score u / (1 - u), capped
``deepshare_gpu_contention``               gauge   per GPU: max over the links it uses
``deepshare_gpu_utilization_ratio``        gauge   NVML busy fraction
``deepshare_probe_available``              gauge   1 / 0 per probe (label ``probe``)
``deepshare_node_report_age_seconds``      gauge   time since the node's last report
``deepshare_node_stale``                   gauge   1 when the age exceeds the staleness timeout
=========================================  ======= ====================================================

Traffic is exported as cumulative counters, Prometheus' convention: take
``rate(deepshare_link_receive_bytes_total[1m])`` for bytes/s; nothing moved between two scrapes is
lost, whatever the scrape and report periods. A counter restarts from 0 when its agent restarts
(``rate()`` handles the reset). The utilisation gauge is the agent's latest sample. A stale
node's series stay (its counters frozen) until the view forgets it, ``stale_retention_s`` after
it turned stale (:class:`~deepshare.agents.view.ClusterState`); then they end.

Values are read from the view at scrape time by a custom collector in a registry of the
exporter's own (no global registry). :meth:`MetricsExporter.start` binds ``127.0.0.1`` unless
told otherwise, is only ever called explicitly, and returns the address actually bound. A Prometheus scrape config::

    scrape_configs:
      - job_name: deepshare-agents
        scrape_interval: 5s
        static_configs:
          - targets: ["HEAD_NODE:9479"]   # the node `deepshare agents start` ran on

(start with ``--metrics-host 0.0.0.0`` for a Prometheus on another machine). A request whose
``Host`` header does not name the endpoint gets a 403 (:func:`host_checked`: DNS rebinding).
"""

from __future__ import annotations

import re
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deepshare.agents.view import ClusterSnapshot

DEFAULT_METRICS_PORT = 9479
_GPU_GAUGE = re.compile(r"^gpu(\d+)/util\Z")


def _families() -> dict[str, Metric]:
    """The nine metric families, empty, by a short key."""
    link, gpu = ["node", "link"], ["node", "gpu"]
    return {
        "rx": CounterMetricFamily("deepshare_link_receive_bytes", "Bytes received on the link since its agent started", labels=link),
        "tx": CounterMetricFamily("deepshare_link_transmit_bytes", "Bytes sent on the link since its agent started", labels=link),
        "util": GaugeMetricFamily("deepshare_link_utilization_ratio", "Link utilisation, max(rx, tx) / capacity", labels=link),
        "cont": GaugeMetricFamily("deepshare_link_contention", "Link contention score u/(1-u), capped", labels=link),
        "gpu": GaugeMetricFamily("deepshare_gpu_contention", "GPU contention score: max over its links", labels=gpu),
        "busy": GaugeMetricFamily("deepshare_gpu_utilization_ratio", "GPU busy fraction (NVML)", labels=gpu),
        "probe": GaugeMetricFamily("deepshare_probe_available", "1 when the probe produced the last sample", labels=["node", "probe"]),
        "age": GaugeMetricFamily("deepshare_node_report_age_seconds", "Seconds since the node's last report", labels=["node"]),
        "stale": GaugeMetricFamily("deepshare_node_stale", "1 when the node's agent stopped reporting", labels=["node"]),
    }


class ViewCollector(Collector):
    """Turns a :class:`ClusterSnapshot` into metric families at every scrape."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, without samples: what the registry maps a
        ``/metrics?name[]=...`` filter through (without it, every filtered page was empty)."""
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        g = _families()
        for n in snap.nodes:
            g["age"].add_metric([n.node], n.age_s)
            g["stale"].add_metric([n.node], float(n.stale))
            r = n.report
            if r is None:
                continue
            for s in r.links:
                labels = [n.node, s.link]
                g["rx"].add_metric(labels, s.rx_bytes_total)
                g["tx"].add_metric(labels, s.tx_bytes_total)
                if s.utilization is not None:
                    g["util"].add_metric(labels, s.utilization)
                if s.contention is not None:
                    g["cont"].add_metric(labels, s.contention)
            for index, score in r.gpus.items():
                g["gpu"].add_metric([n.node, str(index)], score)
            for name, value in r.gauges.items():
                match = _GPU_GAUGE.match(name)
                if match:
                    g["busy"].add_metric([n.node, match.group(1)], value)
            for p in r.probes:
                g["probe"].add_metric([n.node, p.name], float(p.available))
        yield from g.values()


class MetricsExporter:
    """An HTTP ``/metrics`` endpoint over a snapshot function; nothing listens until :meth:`start`.

    :meth:`start` and :meth:`stop` hold one lock: the monitor actor runs up to 8 calls at once,
    and two concurrent starts bound two servers, one of them never stopped."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ViewCollector(snapshot))
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self._asked: tuple[str, int] | None = None  # the (host, port) the running server was started with
        self._allowed: frozenset[str] = frozenset()  # the allowed hosts the running server checks

    @property
    def port(self) -> int | None:
        address = self.address
        return None if address is None else address[1]

    @property
    def address(self) -> tuple[str, int] | None:
        """The ``(host, port)`` the endpoint is bound to (None: not serving)."""
        server = self._server
        return None if server is None else bound_address(server)

    def start(self, port: int = DEFAULT_METRICS_PORT, host: str = "127.0.0.1",
              allowed_hosts: tuple[str, ...] = ()) -> tuple[str, int]:
        """Listen on ``host:port`` (``port=0``: any free port); returns the ``(host, port)`` bound.
        Requests whose ``Host`` header names neither this endpoint nor one of ``allowed_hosts``
        get a 403 (:func:`host_checked`).

        Already serving: the same host, the same allowed hosts and port 0 or the port bound (or
        asked) returns the running address; another host, port or set of allowed hosts raises
        ``ValueError`` naming it, rather than reporting an address nothing listens on, or leaving
        the first start's allowed hosts in force (``stop`` first to move or change it)."""
        from deepshare.core.hosts import host_name

        with self._lock:
            allowed_hosts = tuple(allowed_hosts)  # an iterator is read once
            allowed = frozenset(host_name(a) for a in allowed_hosts if a.strip()) - {"localhost"}  # as HostNames reads them
            if self._server is not None:
                bound = bound_address(self._server)
                asked_host, asked_port = self._asked or bound
                if host != asked_host or port not in (0, asked_port, bound[1]):
                    raise ValueError(f"metrics are already served at {url_host(bound[0])}:{bound[1]}"
                                     f" (asked for {url_host(host)}:{port}); stop them first to move them")
                if allowed != self._allowed:
                    raise ValueError(f"metrics are already served at {url_host(bound[0])}:{bound[1]} allowing the hosts "
                                     f"{sorted(self._allowed)} (asked for {sorted(allowed)}); stop them first to change them")
                return bound
            app = host_checked(make_wsgi_app(self.registry), host, allowed_hosts)
            self._server, self._thread = serve_wsgi(app, host, port)
            self._asked, self._allowed = (host, port), allowed
            return bound_address(self._server)

    def stop(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
                self._thread = None
                self._asked = None


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No line on stderr per scrape (prometheus_client's own handler is as quiet)."""


def host_checked(app: Callable, bound_host: str, allowed: tuple[str, ...] = ()) -> Callable:
    """``app`` (WSGI) answering 403 unless the request's ``Host`` names this endpoint: what
    :class:`~deepshare.core.hosts.HostNames` accepts, as the HTTP services do (localhost and loopback IPs, the bound
    address, ``allowed``; bound to a non-loopback address, any IP literal too), plus, when bound
    to a non-loopback address, this machine's host names. A loopback endpoint answered any
    ``Host``: a web page the user visits could read every node's names and loads through DNS
    rebinding (a name of the page's that resolves to 127.0.0.1)."""
    from deepshare.core.hosts import HostNames, is_loopback

    names = tuple(allowed)
    if not is_loopback(bound_host.strip("[]")):
        names += tuple({socket.gethostname(), socket.getfqdn()} - {""})
    check = HostNames(bound_host, names)

    def guarded(environ: dict, start_response: Callable) -> Any:
        host = environ.get("HTTP_HOST")  # two Host headers arrive joined by a comma: refused, as AllowHosts does
        if host is None or "," in host or not check.allows(host):
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"forbidden: the Host header does not name this metrics endpoint "
                    b"(deepshare agents start --metrics-allowed-host NAME)\n"]
        return app(environ, start_response)

    return guarded


def serve_wsgi(app: Callable, host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """A threading WSGI server for ``app`` on ``host:port`` (IPv6 when ``host`` is an IPv6
    address), served by a daemon thread: what ``prometheus_client.start_http_server`` does,
    around an app of our own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = family

    server = make_server(host.strip("[]"), port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="deepshare-metrics", daemon=True)
    thread.start()
    return server, thread


def bound_address(server: Any) -> tuple[str, int]:
    """``(host, port)`` a socket server is bound to (an IPv6 address has two more fields)."""
    host, port = server.server_address[:2]
    return str(host), int(port)


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
