"""Prometheus endpoint for the monitor's cluster-wide view.

Gauges (all labelled ``node``; link gauges also ``link``):

=====================================  ========================================================
``deepshare_link_utilization``         max(rx, tx) / capacity (links with a known capacity)
``deepshare_link_rx_bytes_per_second`` receive rate
``deepshare_link_tx_bytes_per_second`` transmit rate
``deepshare_link_contention``          contention score u / (1 - u), capped
``deepshare_gpu_contention``           per GPU (label ``gpu``): max over the links it uses
``deepshare_gpu_utilization``          NVML busy fraction (label ``gpu``)
``deepshare_probe_available``          1 / 0 per probe (label ``probe``)
``deepshare_node_report_age_seconds``  time since the node's last report
``deepshare_node_stale``               1 when the age exceeds the staleness timeout
=====================================  ========================================================

Values are read from the view at scrape time by a custom collector in a registry of the
exporter's own (no global registry). :meth:`MetricsExporter.start` binds ``127.0.0.1`` unless
told otherwise and is only ever called explicitly. A Prometheus scrape config::

    scrape_configs:
      - job_name: deepshare-agents
        scrape_interval: 5s
        static_configs:
          - targets: ["HEAD_NODE:9479"]   # the node `deepshare agents start` ran on

(start with ``--metrics-host 0.0.0.0`` for a Prometheus on another machine).
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from deepshare.agents.view import ClusterSnapshot

DEFAULT_METRICS_PORT = 9479
_GPU_GAUGE = re.compile(r"^gpu(\d+)/util$")


class ViewCollector(Collector):
    """Turns a :class:`ClusterSnapshot` into gauge families at every scrape."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self._snapshot()
        g = {
            "util": GaugeMetricFamily("deepshare_link_utilization", "Link utilisation, max(rx, tx) / capacity", labels=["node", "link"]),
            "rx": GaugeMetricFamily("deepshare_link_rx_bytes_per_second", "Link receive rate", labels=["node", "link"]),
            "tx": GaugeMetricFamily("deepshare_link_tx_bytes_per_second", "Link transmit rate", labels=["node", "link"]),
            "cont": GaugeMetricFamily("deepshare_link_contention", "Link contention score u/(1-u), capped", labels=["node", "link"]),
            "gpu": GaugeMetricFamily("deepshare_gpu_contention", "GPU contention score: max over its links", labels=["node", "gpu"]),
            "busy": GaugeMetricFamily("deepshare_gpu_utilization", "GPU busy fraction (NVML)", labels=["node", "gpu"]),
            "probe": GaugeMetricFamily("deepshare_probe_available", "1 when the probe produced the last sample", labels=["node", "probe"]),
            "age": GaugeMetricFamily("deepshare_node_report_age_seconds", "Seconds since the node's last report", labels=["node"]),
            "stale": GaugeMetricFamily("deepshare_node_stale", "1 when the node's agent stopped reporting", labels=["node"]),
        }
        for n in snap.nodes:
            g["age"].add_metric([n.node], n.age_s)
            g["stale"].add_metric([n.node], float(n.stale))
            r = n.report
            if r is None:
                continue
            for s in r.links:
                labels = [n.node, s.link]
                g["rx"].add_metric(labels, s.rx_bytes_per_s)
                g["tx"].add_metric(labels, s.tx_bytes_per_s)
                if s.utilization is not None:
                    g["util"].add_metric(labels, s.utilization)
                if s.contention is not None:
                    g["cont"].add_metric(labels, s.contention)
            for gpu, score in r.gpus.items():
                g["gpu"].add_metric([n.node, str(gpu)], score)
            for name, value in r.gauges.items():
                match = _GPU_GAUGE.match(name)
                if match:
                    g["busy"].add_metric([n.node, match.group(1)], value)
            for p in r.probes:
                g["probe"].add_metric([n.node, p.name], float(p.available))
        yield from g.values()


class MetricsExporter:
    """An HTTP ``/metrics`` endpoint over a snapshot function; nothing listens until :meth:`start`."""

    def __init__(self, snapshot: Callable[[], ClusterSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ViewCollector(snapshot))
        self._server = None
        self._thread = None

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    def start(self, port: int = DEFAULT_METRICS_PORT, host: str = "127.0.0.1") -> int:
        """Listen on ``host:port`` (``port=0``: any free port); returns the bound port."""
        if self._server is not None:
            return self._server.server_port
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._thread = None
