"""Write ``deploy/grafana/deepshare.json``, the Grafana dashboard over DeepShare's Prometheus metrics.

    python deploy/grafana/build_dashboard.py          # rewrites deepshare.json next to this file

The dashboard is generated so that its PromQL lives in one readable place; the test
(``tests/deploy/test_deploy_grafana.py``) checks that the JSON is this script's output and that every
metric a panel queries is one the code exports (the placement service, the node agents' monitor
and the live scheduler, read from their registries). Three rows:

- placement service (``ray_deepshare_serve_*``, from Ray's metrics agents): decision latency
  (HTTP and engine-only quantiles), decisions by action, requests by status code, errors by kind,
  requests deciding now, replicas;
- links and GPUs (``deepshare_link_*``, ``deepshare_gpu_*``, ``deepshare_node_*``, from the agents):
  link utilisation and contention per node, link throughput, GPU utilisation and contention,
  stale nodes;
- live scheduler (``deepshare_scheduler_*``): queue length, running jobs, GPUs in use, launches,
  failures, preemptions, migrations, decision latency, control-loop tick duration, jobs ended
  by state, tick errors.

Import: Grafana > Dashboards > New > Import > upload deepshare.json, pick the Prometheus data
source (the ``datasource`` variable); or provision the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
NODE = 'node=~"$node"'


def quantiles(bucket: str, selector: str = "", by: str = "") -> list[tuple[str, str]]:
    """p50 / p95 / p99 of a histogram's ``_bucket`` series (``by``: extra grouping labels)."""
    group = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return [
        (f"histogram_quantile({q}, sum by ({group}) (rate({bucket}{{{selector}}}[{RATE}])))", f"{legend}p{int(q * 100)}")
        for q in (0.5, 0.95, 0.99)
    ]


class Layout:
    """Places panels left to right on Grafana's 24-column grid, rows top to bottom."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = 0
        self.row_height = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "id": len(self.panels) + 1,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def add(self, title: str, description: str, targets: list[tuple[str, str]], *, unit: str = "short",
            kind: str = "timeseries", w: int = 8, h: int = 8, max_value: float | None = None) -> None:
        if self.x + w > 24:
            self._newline()
        defaults: dict[str, Any] = {"unit": unit}
        if max_value is not None:
            defaults.update(min=0, max=max_value)
        panel = {
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}} if kind == "timeseries" else
                       {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
            "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
                        for i, (expr, legend) in enumerate(targets)],
        }
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_height
        self.x, self.row_height = 0, 0


def service(d: Layout) -> None:
    # Recorded by every replica through Ray's metrics and exported by each node's Ray metrics agent
    # (prefix ray_, labels replica / deployment / application): each replica's counters only grow,
    # so rates and quantiles are taken per series and summed over replicas.
    d.row("Placement service (deepshare serve)")
    d.add("Decision latency (POST /v1/placements)",
          "Request to response of placement requests, in the replicas (quantiles over all replicas).",
          quantiles("ray_deepshare_serve_request_duration_seconds_bucket", 'route="/v1/placements"'), unit="s")
    d.add("Decision latency, engine only",
          "Time the policy took to decide one request inside the replica (no HTTP), successful decisions.",
          quantiles("ray_deepshare_serve_decision_duration_seconds_bucket", 'outcome="ok"'), unit="s")
    d.add("Decisions by action", "Decisions answered per second: place, wait, preempt, migrate.",
          [(f"sum by (action) (rate(ray_deepshare_serve_decisions_total[{RATE}]))", "{{action}}")], unit="ops")
    d.add("Requests by status code", "HTTP requests per second by route and status (499: the client left first).",
          [(f"sum by (route, code) (rate(ray_deepshare_serve_requests_total[{RATE}]))", "{{route}} {{code}}")], unit="reqps")
    d.add("Errors by kind", "4xx/5xx answers per second by cause (invalid, unauthorized, too_large, server, ...).",
          [(f"sum by (kind) (rate(ray_deepshare_serve_errors_total[{RATE}]))", "{{kind}}")], unit="reqps")
    d.add("Requests deciding now", "Placement requests deciding or waiting for a decision thread, all replicas.",
          [("sum(ray_deepshare_serve_decisions_in_flight)", "in flight")])
    d.add("Replicas", "Replicas of the placement service reporting, by the policy they serve.",
          [("count by (policy) (ray_deepshare_serve_build_info)", "{{policy}}")], kind="stat", w=4, h=6)


def agents(d: Layout) -> None:
    d.row("Links and GPUs (node agents)")
    d.add("Link utilisation per node", "max(rx, tx) / capacity of each link with a known capacity (node-wide nic and pcie aggregates).",
          [(f'max by (node, link) (deepshare_link_utilization_ratio{{{NODE}, link=~"nic|pcie"}})', "{{node}} {{link}}")],
          unit="percentunit", max_value=1)
    d.add("Link contention per node", "The worst link's contention score u / (1 - u) on each node (0: idle links).",
          [(f"max by (node) (deepshare_link_contention{{{NODE}}})", "{{node}}")])
    d.add("Link throughput", "Bytes per second sent and received on each node's NIC (rate of the agents' counters).",
          [(f'sum by (node) (rate(deepshare_link_transmit_bytes_total{{{NODE}, link="nic"}}[{RATE}]))', "{{node}} tx"),
           (f'sum by (node) (rate(deepshare_link_receive_bytes_total{{{NODE}, link="nic"}}[{RATE}]))', "{{node}} rx")],
          unit="Bps")
    d.add("GPU utilisation", "NVML busy fraction, averaged over each node's GPUs.",
          [(f"avg by (node) (deepshare_gpu_utilization_ratio{{{NODE}}})", "{{node}}")], unit="percentunit", max_value=1)
    d.add("GPU contention", "Per node, the worst GPU's contention (max over the links each GPU uses).",
          [(f"max by (node) (deepshare_gpu_contention{{{NODE}}})", "{{node}}")])
    d.add("Stale nodes and report age", "Nodes whose agent stopped reporting, and the oldest report's age.",
          [(f"sum(deepshare_node_stale{{{NODE}}})", "stale nodes"),
           (f"max(deepshare_node_report_age_seconds{{{NODE}}})", "oldest report (s)")])


def scheduler(d: Layout) -> None:
    d.row("Live scheduler (deepshare scheduler)")
    d.add("Queue length", "Jobs queued now.", [("sum(deepshare_scheduler_queue_length)", "queued")], kind="stat", w=4, h=6)
    d.add("Running jobs", "Jobs running now.", [("sum(deepshare_scheduler_running_jobs)", "running")], kind="stat", w=4, h=6)
    d.add("GPUs in use", "GPUs held by the scheduler's running jobs.", [("sum(deepshare_scheduler_gpus_in_use)", "GPUs")],
          kind="stat", w=4, h=6)
    d.add("Queue and running jobs over time", "Queued and running jobs.",
          [("sum(deepshare_scheduler_queue_length)", "queued"), ("sum(deepshare_scheduler_running_jobs)", "running")],
          w=12, h=6)
    d.add("Launches, failures, preemptions, migrations", "Events per second of the control loop.",
          [(f"sum(rate(deepshare_scheduler_launches_total[{RATE}]))", "launches"),
           (f"sum(rate(deepshare_scheduler_launch_failures_total[{RATE}]))", "launch failures"),
           (f"sum(rate(deepshare_scheduler_preemptions_total[{RATE}]))", "preemptions"),
           (f"sum(rate(deepshare_scheduler_migrations_total[{RATE}]))", "migrations")], unit="ops")
    d.add("Scheduler decision latency", "Time the scheduler's policy took to decide.",
          quantiles("deepshare_scheduler_decision_duration_seconds_bucket"), unit="s")
    d.add("Control-loop tick duration", "Time one tick of the control loop took (decide, launch, preempt, migrate).",
          quantiles("deepshare_scheduler_tick_duration_seconds_bucket"), unit="s")
    d.add("Jobs ended by state", "Jobs that ended per second: finished, failed, cancelled.",
          [(f"sum by (state) (rate(deepshare_scheduler_jobs_ended_total[{RATE}]))", "{{state}}")], unit="ops", w=12)
    d.add("Control-loop tick errors", "Ticks per second that failed or whose decision was refused (should stay 0).",
          [(f"sum(rate(deepshare_scheduler_tick_errors_total[{RATE}]))", "tick errors")], unit="ops", w=12)


def dashboard() -> dict[str, Any]:
    d = Layout()
    service(d)
    agents(d)
    scheduler(d)
    return {
        "uid": "deepshare",
        "title": "DeepShare",
        "description": "Placement service, node agents (links, GPUs) and live scheduler of DeepShare",
        "tags": ["deepshare", "ray", "scheduling"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "",
        "graphTooltip": 1,
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1},
            {"name": "node", "label": "node", "type": "query", "datasource": DS,
             "query": {"query": "label_values(deepshare_node_report_age_seconds, node)", "refId": "node"},
             "definition": "label_values(deepshare_node_report_age_seconds, node)",
             "multi": True, "includeAll": True, "allValue": ".*", "current": {}, "refresh": 2, "sort": 1, "hide": 0},
        ]},
        "annotations": {"list": []},
        "panels": d.panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    target = Path(__file__).resolve().parent / "deepshare.json"
    target.write_text(render())
    print(f"wrote {target}")
