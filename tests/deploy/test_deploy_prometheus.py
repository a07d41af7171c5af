"""Prometheus scrape configs (``deploy/prometheus/``): well-formed, one job per component, the
ports and names the code and the manifests use, tokens only from files."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
JOBS = {"deepshare-placement", "deepshare-agents", "deepshare-scheduler"}
# Prometheus's own field names (https://prometheus.io/docs/prometheus/latest/configuration/configuration/):
# a misspelled one makes Prometheus refuse the whole file.
SCRAPE_KEYS = {"job_name", "scrape_interval", "scrape_timeout", "metrics_path", "scheme", "authorization",
               "basic_auth", "tls_config", "static_configs", "kubernetes_sd_configs", "relabel_configs",
               "metric_relabel_configs", "honor_labels", "params"}
RELABEL_KEYS = {"source_labels", "separator", "regex", "modulus", "target_label", "replacement", "action"}
ACTIONS = {"replace", "keep", "drop", "keepequal", "dropequal", "hashmod", "labelmap", "labeldrop", "labelkeep",
           "lowercase", "uppercase"}
SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def jobs(name: str) -> dict[str, dict]:
    raw = yaml.safe_load((PROM / name).read_text())
    assert set(raw) == {"scrape_configs"}
    return {job["job_name"]: job for job in raw["scrape_configs"]}


@pytest.mark.parametrize("name", ["static.yaml", "kubernetes.yaml"])
def test_each_config_has_one_well_formed_job_per_component(name):
    found = jobs(name)
    assert set(found) == JOBS
    for job in found.values():
        assert set(job) <= SCRAPE_KEYS, set(job) - SCRAPE_KEYS
        assert job["metrics_path"] == "/metrics"
        for rule in job.get("relabel_configs", []):
            assert set(rule) <= RELABEL_KEYS and rule.get("action", "replace") in ACTIONS
        for sd in job.get("kubernetes_sd_configs", []):
            assert sd["role"] in SD_ROLES


@pytest.mark.parametrize("name", ["static.yaml", "kubernetes.yaml"])
def test_tokens_come_from_files_and_only_where_the_endpoint_needs_one(name):
    found = jobs(name)
    auth = found["deepshare-scheduler"]["authorization"]
    assert auth["type"] == "Bearer" and set(auth) == {"type", "credentials_file"}
    # the agents' exporter and Ray's metrics agents (the placement service's metrics) have no token
    assert "authorization" not in found["deepshare-agents"] and "authorization" not in found["deepshare-placement"]
    assert "credentials:" not in (PROM / name).read_text()


def _scheduler_port_default() -> int:
    from deepshare.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    scheduler = sub.choices["scheduler"]
    start = next(a for a in scheduler._actions if isinstance(a, argparse._SubParsersAction)).choices["start"]
    return next(a for a in start._actions if "--port" in a.option_strings).default


def test_static_targets_use_the_ports_the_code_serves_on():
    from deepshare.agents.exporter import DEFAULT_METRICS_PORT
    from deepshare.serving.metrics import METRICS_PORT

    found = jobs("static.yaml")
    port = {name: int(job["static_configs"][0]["targets"][0].rsplit(":", 1)[1]) for name, job in found.items()}
    assert port == {"deepshare-placement": METRICS_PORT, "deepshare-agents": DEFAULT_METRICS_PORT,
                    "deepshare-scheduler": _scheduler_port_default()}
    text = (PROM / "static.yaml").read_text()
    assert f"--metrics-export-port={METRICS_PORT}" in text and f"deepshare serve --metrics-port {METRICS_PORT}" in text


def test_kubernetes_discovery_matches_the_manifests():
    from deepshare.agents.exporter import DEFAULT_METRICS_PORT

    from deepshare.serving.metrics import METRICS_PORT

    found = jobs("kubernetes.yaml")
    service = yaml.safe_load((ROOT / "deploy" / "kuberay" / "rayservice-placement.yaml").read_text())
    keep = {r["source_labels"][0]: r["regex"] for r in found["deepshare-placement"]["relabel_configs"] if r.get("action") == "keep"}
    # every pod of the RayService's cluster, which KubeRay names <rayservice>-<suffix>
    assert re.fullmatch(keep["__meta_kubernetes_pod_label_ray_io_cluster"], service["metadata"]["name"] + "-x7k2q")
    assert not re.fullmatch(keep["__meta_kubernetes_pod_label_ray_io_cluster"], "deepshare")  # not the training cluster
    cluster = service["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:  # every node's Ray metrics agent
        assert group["rayStartParams"]["metrics-export-port"] == str(METRICS_PORT)
        (container,) = group["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[keep["__meta_kubernetes_pod_container_port_name"]] == METRICS_PORT

    cluster = yaml.safe_load((ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml").read_text())
    (head,) = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in head["ports"]}
    for job, port in (("deepshare-agents", DEFAULT_METRICS_PORT), ("deepshare-scheduler", _scheduler_port_default())):
        rules = found[job]["relabel_configs"]
        assert rules[0]["regex"] == f"{cluster['metadata']['name']};head"
        name = next(r["regex"] for r in rules if r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"])
        assert ports[name] == port
    hook = " ".join(head["lifecycle"]["postStart"]["exec"]["command"])
    assert f"--metrics-port {DEFAULT_METRICS_PORT} --metrics-host 0.0.0.0" in hook  # reachable from Prometheus
