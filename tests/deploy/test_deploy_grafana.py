"""The Grafana dashboard queries only metrics the code exports, and covers what operators look at.

The exported names are read from the code: the registries of the agents' exporter
(``deepshare/agents/exporter.py``) and the live scheduler (``deepshare/runtime/metrics.py``) are
instantiated and their metric families listed, with the sample suffixes Prometheus gives each type
(``_total`` for counters, ``_bucket`` / ``_sum`` / ``_count`` for histograms, ...); the placement
service records through Ray's metrics, whose exported names (``ray_`` + name + suffix) its
module lists (``exported_samples``, checked against a real scrape by
``tests/serving/test_serving_replicas.py``). The metric names a panel queries are parsed out of
its PromQL.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "gauge": ("",),
}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless",
    "inf", "nan", "le",
}


def sample_names(registry) -> set[str]:  # type: ignore[no-untyped-def]
    names = set()
    for family in registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    return names


def exported_metrics() -> dict[str, set[str]]:
    """Every sample name each component exports, from its own registry."""
    from deepshare.agents.exporter import MetricsExporter
    from deepshare.agents.view import ClusterSnapshot
    from deepshare.runtime.metrics import SchedulerMetrics
    from deepshare.serving.metrics import exported_samples

    return {
        "service": set(exported_samples()),
        "agents": sample_names(MetricsExporter(lambda: ClusterSnapshot(nodes=(), stale_after_s=5.0)).registry),
        "scheduler": sample_names(SchedulerMetrics("0.1.0", "las+spread", lambda: ({}, 0)).registry),
    }


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels, keywords and strings left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # grouping labels
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    text = re.sub(r"\boffset\s+-?\w+", " ", text)  # offset durations
    text = re.sub(r"(?<![\w.])\d+(\.\d*)?([eE][-+]?\d+)?", " ", text)  # numbers (1e-3 has no metric "e")
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        after = text[match.end():].lstrip()
        if after.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function or a keyword
        names.add(word)
    return names


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target and every query variable."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            out.append((f"variable {var['name']}", inner.group(1) if inner else query))
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads((GRAFANA / "deepshare.json").read_text())


def test_the_json_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("build_dashboard", GRAFANA / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert (GRAFANA / "deepshare.json").read_text() == module.render(), "run python deploy/grafana/build_dashboard.py"


@pytest.mark.parametrize(
    "expr, names",
    [
        ('histogram_quantile(0.95, sum by (le) (rate(a_seconds_bucket{route="/v1/x", code=~"5.."}[5m])))', {"a_seconds_bucket"}),
        ("sum by (action) (rate(b_total[$__rate_interval])) / ignoring(action) group_left sum(c)", {"b_total", "c"}),
        ('max by (node, link) (d_ratio{node=~"$node"}) > bool 0.5 or on(node) e', {"d_ratio", "e"}),
        ("abs(f) * 1e-3", {"f"}),  # a function's name is not a metric, nor is a number's exponent
        ('g offset 5m unless h{le="+Inf"}', {"g", "h"}),
    ],
)
def test_metric_names_are_parsed_out_of_promql(expr, names):
    assert metric_names(expr) == names


def test_every_queried_metric_is_exported_by_the_code(dashboard):
    exported = set().union(*exported_metrics().values())
    missing = sorted({(title, name) for title, expr in queries(dashboard) for name in metric_names(expr) if name not in exported})
    assert missing == []


def test_a_misspelled_metric_would_be_caught(dashboard):
    exported = set().union(*exported_metrics().values())
    assert "ray_deepshare_serve_decisions_total" in exported and "deepshare_serve_decisions_total" not in exported
    assert metric_names("rate(deepshare_serve_decisions_total[5m])") - exported == {"deepshare_serve_decisions_total"}


def test_every_component_is_on_the_dashboard(dashboard):
    queried = {name for _, expr in queries(dashboard) for name in metric_names(expr)}
    for component, names in exported_metrics().items():
        assert queried & names, component


@pytest.mark.parametrize(
    "title, metric",
    [
        ("Decision latency (POST /v1/placements)", "ray_deepshare_serve_request_duration_seconds_bucket"),
        ("Decisions by action", "ray_deepshare_serve_decisions_total"),
        ("Replicas", "ray_deepshare_serve_build_info"),
        ("Link utilisation per node", "deepshare_link_utilization_ratio"),
        ("Link contention per node", "deepshare_link_contention"),
        ("GPU utilisation", "deepshare_gpu_utilization_ratio"),
        ("Queue length", "deepshare_scheduler_queue_length"),
        ("Running jobs", "deepshare_scheduler_running_jobs"),
    ],
)
def test_the_panels_operators_asked_for_are_there(dashboard, title, metric):
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert any(metric in metric_names(t["expr"]) for t in panels[title]["targets"])


def test_the_dashboard_is_importable(dashboard):
    assert dashboard["uid"] and dashboard["title"] == "DeepShare" and isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    occupied = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & occupied, panel["title"]  # no two panels overlap
        occupied |= cells
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"])
