"""Every ``rayStartParams`` pair is pasted as ``--KEY=VALUE`` into the ``ray start`` line bash
runs in a KubeRay pod: ``block: "true; curl x | sh"`` validated and would have run ``curl`` there
(left by the review of ``resources``, the one value that is a quoted JSON object)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from deepshare.core.errors import DeepShareError
from deepshare.raycluster.cluster_yaml import parse_cluster_yaml

KUBERAY = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster_yamls" / "kuberay-autoscaling.yaml").read_text())


def with_params(group: str, **params: str):
    doc = copy.deepcopy(KUBERAY)
    target = doc["spec"]["headGroupSpec"] if group == "head" else doc["spec"]["workerGroupSpecs"][0]
    target["rayStartParams"].update(params)
    return parse_cluster_yaml(yaml.safe_dump(doc), "k.yaml")


@pytest.mark.parametrize("group, where", [("head", "spec.headGroupSpec.rayStartParams"),
                                          ("worker", "spec.workerGroupSpecs[0].rayStartParams")])
@pytest.mark.parametrize("value", ["true; curl x | sh", "true && id", "$(id -un)", "`id`", "x > /etc/passwd",
                                   "true\nid"])
def test_a_value_holding_a_shell_command_is_refused_naming_it(group, where, value):
    with pytest.raises(DeepShareError) as info:
        with_params(group, block=value)
    message = str(info.value)
    assert message.startswith(f"k.yaml: {where}.block: ") and "shell syntax" in message and "\n" not in message


@pytest.mark.parametrize("key", ["block; id", "Num-GPUs", "x=y", ""])
def test_a_key_that_is_no_option_name_is_refused(key):
    with pytest.raises(DeepShareError, match="expected a ray start option name"):
        with_params("worker", **{key: "1"})


@pytest.mark.parametrize("params", [{"block": "true"}, {"node-ip-address": "$MY_POD_IP"},
                                    {"object-store-memory": "1000000000"}, {"dashboard-host": "0.0.0.0"}])
def test_plain_values_and_an_environment_variable_are_accepted(params):
    """KubeRay's own examples pass ``node-ip-address: $MY_POD_IP``: bash expands it, runs nothing."""
    assert with_params("head", **params).workers
    assert with_params("worker", **params).workers[0].gpus == 4
