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


@pytest.mark.parametrize("key, value", [
    ("resources", '{\\"deepshare_fabric_pcie\\":1,\\"accel_tag\\":1}'),  # one JSON word to shlex, two to bash
    ("object-store-memory", "{1,2}"), ("block", "{1..3}"),
])
def test_a_value_bash_splits_by_brace_expansion_is_refused(key, value):
    with pytest.raises(DeepShareError) as info:
        with_params("worker", **{key: value})
    message = str(info.value)
    assert f"rayStartParams.{key}: " in message and "brace expansion" in message and "\n" not in message


@pytest.mark.parametrize("value", ['\'{"deepshare_fabric_pcie": 1, "accel_tag": 1}\'',
                                   '"{\\"deepshare_fabric_pcie\\": 1, \\"accel_tag\\": 1}"'])
def test_quoted_resources_with_several_keys_still_pass(value):
    assert with_params("worker", resources=value) is not None


LOCAL = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster_yamls" / "local-onprem.yaml").read_text())


@pytest.mark.parametrize("written, passes", [
    ('--resources={\\"deepshare_fabric_pcie\\":1,\\"x\\":1}', False),
    ("--resources='{\"deepshare_fabric_pcie\": 1, \"x\": 1}'", True),
    ("--resources '{\"deepshare_fabric_pcie\": 1, \"x\": 1}'", True),
    ('--resources {\\"deepshare_fabric_pcie\\":1,\\"x\\":1}', False),
])
def test_a_local_worker_line_whose_options_bash_would_split_is_refused(written, passes):
    import re

    doc = copy.deepcopy(LOCAL)
    commands = doc["worker_start_ray_commands"]
    i = next(i for i, c in enumerate(commands) if "--resources" in c)
    commands[i] = re.sub(r"--resources=('[^']*'|\S+)", lambda _: written, commands[i])
    if passes:
        assert parse_cluster_yaml(yaml.safe_dump(doc), "local.yaml") is not None
    else:
        with pytest.raises(DeepShareError, match=r"worker_start_ray_commands: --resources: bash's brace expansion"):
            parse_cluster_yaml(yaml.safe_dump(doc), "local.yaml")


@pytest.mark.parametrize("command, refused", [
    ('ray start --head \\\n--resources={\\"a\\":1,\\"b\\":1}', True),  # a continued line is one command
    ('ray start --head --resources \\\n  {\\"a\\":1,\\"b\\":1}', True),
    ('ray start --head --num-gpus=1  # was: --resources={\\"a\\":1,\\"b\\":1}', False),  # a comment
    ("echo --resources={a,b} && ray start --head --num-gpus=1", False),  # another program's option
    ("ray start --head --num-gpus=1; echo --labels={a,b}", False),
    ('"$HOME/venv/bin/ray" start --head --resources={\\"a\\":1,\\"b\\":1}', True),  # a quoted program
    ("'ray' \"start\" --head --resources={a,b}", True),
    ('ray start --head --num-gpus=1 |& tee --resources={a,b}', False),  # |& ends ray start's options
])
def test_only_ray_starts_own_options_are_checked_for_brace_expansion_as_bash_reads_the_line(command, refused):
    from deepshare.raycluster.cluster_yaml import _ray_start_options

    if refused:
        with pytest.raises(DeepShareError, match="brace expansion"):
            _ray_start_options(command, "w")
    else:
        assert _ray_start_options(command, "w")["--num-gpus"] == "1"
