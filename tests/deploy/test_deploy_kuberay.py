"""Every Kubernetes manifest validates against the vendored KubeRay v1.7.0 CRD schemas.

The RayCluster manifest uses KubeRay's current form (top-level ``labels`` per group); the old
``rayStartParams.labels`` form, which KubeRay >= 1.5 refuses, is refused by
``deepshare cluster validate`` with a message saying what to use, and a misspelled field fails
the CRD schema.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from deepshare.raycluster.cluster_yaml import load_cluster_yaml, parse_cluster_yaml
from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from kuberay_crd import CRDS, deprecated, errors, strict

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml"


def kubernetes_manifests() -> list[Path]:
    """Every YAML in the repository whose documents have a ``kind`` (Kubernetes objects)."""
    found = []
    for path in sorted([*ROOT.glob("cluster_yamls/*.yaml"), *ROOT.glob("deploy/**/*.yaml")]):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        if any("kind" in d for d in docs):
            found.append(path)
    return found


def ray_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and str(d.get("apiVersion", "")).startswith("ray.io/")]


def test_the_manifests_are_found():
    names = {p.name for p in kubernetes_manifests()}
    assert {"kuberay-autoscaling.yaml", "rayservice-placement.yaml"} <= names


@pytest.mark.parametrize("path", kubernetes_manifests(), ids=lambda p: p.name)
def test_every_ray_manifest_validates_against_its_crd(path):
    docs = ray_documents(path)
    assert docs, f"{path.name}: no ray.io object"
    for doc in docs:
        assert errors(doc) == [], f"{path.name} {doc['kind']}"


@pytest.mark.parametrize("path", kubernetes_manifests(), ids=lambda p: p.name)
def test_no_manifest_sets_a_field_kuberay_no_longer_uses(path):
    for doc in ray_documents(path):
        assert deprecated(doc) == [], f"{path.name} {doc['kind']}"


def test_a_deprecated_field_would_be_named():
    service = {"kind": "RayService", "spec": {"serviceUnhealthySecondThreshold": 900, "excludeHeadPodFromServeSvc": True}}
    assert deprecated(service) == ["spec.serviceUnhealthySecondThreshold: not used anymore (KubeRay issue 1685)"]
    assert deprecated({"kind": "RayCluster", "spec": {"serviceUnhealthySecondThreshold": 900}}) == []


def test_the_vendored_schemas_say_their_version():
    readme = (CRDS / "README.md").read_text()
    assert "v1.7.0" in readme and "59d663aeec13760646da3db9c1cf8cfe883e30b7" in readme
    assert {p.name for p in CRDS.glob("*.json")} == {"raycluster.v1.schema.json", "rayservice.v1.schema.json"}


def test_kuberay_manifest_uses_top_level_labels_per_group():
    raw = yaml.safe_load(KUBERAY.read_text())
    for group in raw["spec"]["workerGroupSpecs"]:
        assert "labels" not in group["rayStartParams"]
        assert group["labels"]["deepshare.io/fabric"] in ("pcie", "nvlink")
    cluster = load_cluster_yaml(KUBERAY)
    assert [(w.name, w.gpus, w.hardware.fabric, w.hardware.price_usd_per_hour) for w in cluster.workers] == [
        ("l4-pcie", 4, "pcie", 3.999), ("a100-nvlink", 8, "nvlink", 29.387)]


def _old_form(raw: dict) -> None:
    group = raw["spec"]["workerGroupSpecs"][1]
    labels = group.pop("labels")
    group["rayStartParams"]["labels"] = ",".join(f"{k}={v}" for k, v in labels.items())


def _edit(change) -> dict:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(KUBERAY.read_text())
    change(raw)
    return raw


def test_old_rayStartParams_labels_form_is_refused_with_the_fix_named(tmp_path, capsys):
    raw = _edit(_old_form)
    assert errors(raw) == []  # the CRD schema lets it through (rayStartParams is a string map) ...
    with pytest.raises(DeepShareError, match=r"workerGroupSpecs\[1\]\.rayStartParams\.labels: KubeRay >= 1\.5 rejects .*top-level labels"):
        parse_cluster_yaml(yaml.safe_dump(raw), "k.yaml")  # ... so the project's check refuses it
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["cluster", "validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "top-level labels" in err[0] and "Traceback" not in err[0]


def test_head_rayStartParams_labels_is_refused_too():
    raw = _edit(lambda r: r["spec"]["headGroupSpec"]["rayStartParams"].update(labels="deepshare.io/role=head"))
    with pytest.raises(DeepShareError, match=r"headGroupSpec\.rayStartParams\.labels.*top-level labels"):
        parse_cluster_yaml(yaml.safe_dump(raw), "k.yaml")


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda r: r["spec"]["workerGroupSpecs"][0].update(resources={"deepshare_fabric_pcie": "1"}), r"workerGroupSpecs\[0\]\.resources.*not both"),
        (lambda r: r["spec"]["workerGroupSpecs"][0].pop("labels"), r"workerGroupSpecs\[0\]\.labels: expected a mapping"),
        (lambda r: r["spec"]["workerGroupSpecs"][0]["labels"].update({"deepshare.io/nic-gbps": 50}), "must be a string"),
        (lambda r: r["spec"]["workerGroupSpecs"][0]["labels"].update({"deepshare.io/fabric": "copper"}), r"workerGroupSpecs\[0\]\.labels.*fabric"),
    ],
)
def test_bad_top_level_labels_and_resources_are_named(change, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_cluster_yaml(yaml.safe_dump(_edit(change)), "k.yaml")


@pytest.mark.parametrize(
    "change, path",
    [
        (lambda r: r["spec"]["workerGroupSpecs"][0].update(maxReplica=3), "spec.workerGroupSpecs.0"),  # misspelled
        (lambda r: r["spec"].update(enableInTreeAutoscale=True), "spec"),
        (lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(imagePullPolicy=3), "imagePullPolicy"),
        (lambda r: r["spec"]["workerGroupSpecs"][0].update(minReplicas="0"), "minReplicas"),
        (lambda r: r["spec"]["workerGroupSpecs"][0].pop("groupName"), "spec.workerGroupSpecs.0"),
        (lambda r: r["spec"]["workerGroupSpecs"][0]["labels"].update({"deepshare.io/pcie-switches": 1}), "labels.deepshare.io/pcie-switches"),
        (lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"].append(
            copy.deepcopy(r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0])), "containers"),  # two named ray-head
        (lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="6379x"), "containerPort"),
    ],
)
def test_wrong_fields_fail_the_crd_schema(change, path):
    found = errors(_edit(change))
    assert found and any(path in e for e in found), found


def test_int_or_string_quantities_accept_both_and_nothing_else():
    ok = _edit(lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu=7))
    assert errors(ok) == []
    bad = _edit(lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu=[7]))
    assert any("limits.cpu" in e for e in errors(bad))


def test_strict_closes_objects_but_leaves_maps_open():
    schema = strict({"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "string"}},
                                                       "b": {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": True}}})
    assert schema["additionalProperties"] is False
    assert schema["properties"]["a"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in schema["properties"]["b"]


def test_wrong_kind_or_api_version_is_named():
    assert errors({"apiVersion": "ray.io/v1", "kind": "RayJob"})[0].startswith("kind:")
    assert errors({"apiVersion": "ray.io/v1alpha1", "kind": "RayCluster"})[0].startswith("apiVersion:")
