"""``ray start --resources`` as the shell and Ray read it (review findings).

KubeRay pastes ``rayStartParams.resources`` verbatim into ``ray start ... --resources=VALUE``,
a line ``/bin/bash -lc`` runs: unquoted JSON split into two words there (``ray start`` failed in
the pod), a ``$(...)`` inside a resource name ran, the single-quoted form KubeRay itself writes was
refused, and ``GPU`` / ``CPU`` / ``memory`` / ``object_store_memory``, which ``ray start`` refuses in
``--resources``, passed, on KubeRay and in a local cluster's ``ray start`` line alike.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from deepshare.core.errors import DeepShareError
from deepshare.raycluster.cluster_yaml import parse_cluster_yaml

ROOT = Path(__file__).resolve().parents[2] / "cluster_yamls"
KUBERAY = yaml.safe_load((ROOT / "kuberay-autoscaling.yaml").read_text())
LOCAL = yaml.safe_load((ROOT / "local-onprem.yaml").read_text())
FIELD = "spec.workerGroupSpecs[0].rayStartParams.resources"


def kuberay(resources: str):
    doc = copy.deepcopy(KUBERAY)
    doc["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"] = resources
    return parse_cluster_yaml(yaml.safe_dump(doc), "k.yaml")


@pytest.mark.parametrize("value", ['"{\\"deepshare_fabric_pcie\\": 1}"',  # as shipped
                                   """'{"deepshare_fabric_pcie": 1}'""",  # as KubeRay writes it
                                   """'{"deepshare_fabric_pcie": 1, "accelerator_type:L4": 1}'"""])
def test_a_quoted_json_object_is_accepted_in_either_quotes(value):
    assert kuberay(value).workers[0].hardware.fabric == "pcie"


@pytest.mark.parametrize("value, message", [
    ('{"deepshare_fabric_pcie": 1}', "is 2 shell words in KubeRay's `ray start --resources=...` line"),
    ('{"deepshare_fabric_pcie":1}', "expected a JSON object in quotes"),  # one word, but bash drops its quotes
    ('"{\\"deepshare_fabric_pcie\\": 1}" --block', "is 2 shell words"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"$(id -un)\\": 1}"', "resource name '$(id -un)': expected 1-128 letters"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"`id`\\": 1}"', "resource name '`id`'"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"GPU\\": 4}"', "GPU: one of Ray's own resources, which ray start refuses "
                                                         "in --resources (give it with --num-gpus)"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"CPU\\": 4}"', "CPU: one of Ray's own resources"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"memory\\": 4}"', "memory: one of Ray's own resources"),
    ('"{\\"deepshare_fabric_pcie\\": 1, \\"object_store_memory\\": 4}"', "object_store_memory: one of Ray's own"),
    ('"{\\"deepshare_fabric_pcie\\": 1}', "is not valid shell text"),
])
def test_a_value_bash_or_ray_start_would_misread_is_refused_naming_the_field(value, message):
    with pytest.raises(DeepShareError) as caught:
        kuberay(value)
    text = str(caught.value)
    assert text.startswith(f"k.yaml: {FIELD}: ") and message in text and "\n" not in text, text


@pytest.mark.parametrize("key", ["GPU", "CPU", "memory", "object_store_memory"])
def test_a_local_ray_start_with_rays_own_resource_in_resources_is_refused(key):
    doc = copy.deepcopy(LOCAL)
    line = doc["worker_start_ray_commands"][1]
    doc["worker_start_ray_commands"][1] = line.replace('{"deepshare_fabric_pcie": 1}',
                                                       f'{{"deepshare_fabric_pcie": 1, "{key}": 8}}')
    with pytest.raises(DeepShareError, match=f"^l.yaml: worker_start_ray_commands --resources: {key}: one of Ray's own"):
        parse_cluster_yaml(yaml.safe_dump(doc), "l.yaml")
