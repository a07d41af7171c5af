"""Only the hyphenated ``deepshare.io/*`` label names are labels (review finding): the validator
read ``deepshare.io/nic_gbps`` as ``nic-gbps``, so a YAML said 400 Gb/s and passed, while the live
scheduler, which reads ``deepshare.io/nic-gbps`` only, scheduled the node at its 40 Gb/s default;
with both spellings one won silently."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from deepshare.core.errors import DeepShareError
from deepshare.raycluster.cluster_yaml import parse_cluster_yaml
from deepshare.raycluster.labels import parse_labels

ROOT = Path(__file__).resolve().parents[2] / "cluster_yamls"
KUBERAY = yaml.safe_load((ROOT / "kuberay-autoscaling.yaml").read_text())
GOOD = {"deepshare.io/gpu-model": "L4", "deepshare.io/fabric": "pcie", "deepshare.io/nic": "ethernet",
        "deepshare.io/nic-gbps": "50", "deepshare.io/price-usd-per-hour": "4"}


@pytest.mark.parametrize("name", ["nic_gbps", "intra_node_gbps", "gpu_model", "price_usd_per_hour",
                                  "pcie_switches", "nvlink_gbps", "provisioning_s"])
def test_an_underscore_spelling_is_refused_naming_the_label_and_its_real_name(name):
    hyphenated = name.replace("_", "-")
    labels = {k: v for k, v in GOOD.items() if k != f"deepshare.io/{hyphenated}"}
    labels[f"deepshare.io/{name}"] = "400" if "gbps" in name or name.endswith("_s") else "2" if "switch" in name else "L4"
    with pytest.raises(DeepShareError) as caught:
        parse_labels(labels, "w.labels")
    assert str(caught.value) == (f"w.labels: deepshare.io/{name}: unknown DeepShare label "
                                 f"(the names are hyphenated: deepshare.io/{hyphenated})")


def test_both_spellings_in_a_kuberay_group_are_refused_not_one_silently_kept():
    doc = copy.deepcopy(KUBERAY)
    doc["spec"]["workerGroupSpecs"][0]["labels"]["deepshare.io/nic_gbps"] = "400"
    with pytest.raises(DeepShareError, match=r"labels: deepshare.io/nic_gbps: unknown DeepShare label"):
        parse_cluster_yaml(yaml.safe_dump(doc), "k.yaml")


def test_the_hyphenated_names_still_parse():
    assert parse_labels(GOOD, "w").nic_gbps == 50.0
