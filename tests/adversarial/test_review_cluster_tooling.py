"""An adversarial review of ``deepshare cluster`` and the autoscaling spec (cluster YAMLs,
KubeRay manifests): what it found, each case failing before its fix.

- A manifest of the wrong shape was an ``AttributeError`` traceback, not one line.
- ``cluster validate`` said OK to files that ``cluster spec`` then crashed on (pydantic
  tracebacks): validation now builds the autoscaling spec too.
- ``cluster spec`` wrote a spec that no longer meant the file: the launcher's global
  ``max_workers``, KubeRay's ``numOfHosts`` and ``suspend`` were ignored, ``true`` read as 1.
- The local provider's ``ray start`` options were read from comments and other commands.
- An autoscaling spec's slots (the sum of ``max_nodes``) were unbounded: 99,998 made a 150-job
  run take 150 s against 1 s.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from deepshare.cli import main
from deepshare.core.autoscaling import parse_autoscale_spec
from deepshare.core.autoscaling.pool import NodePool
from deepshare.core.autoscaling.spec import build_slots
from deepshare.core.errors import DeepShareError
from deepshare.raycluster.cluster_yaml import parse_cluster_yaml, to_autoscale_spec

ROOT = Path(__file__).resolve().parents[2]
AWS = ROOT / "cluster_yamls" / "aws-gpu-mixed.yaml"
LOCAL = ROOT / "cluster_yamls" / "local-onprem.yaml"
KUBERAY = ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml"
AWS_MIXED = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"


def edited(path: Path, change) -> str:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(path.read_text())
    change(raw)
    return yaml.safe_dump(raw, sort_keys=False)


def group(raw, i=0):  # type: ignore[no-untyped-def]
    return raw["spec"]["workerGroupSpecs"][i]


def head(raw):  # type: ignore[no-untyped-def]
    """The head group's first container."""
    return raw["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


def head_hook(raw, command):  # type: ignore[no-untyped-def]
    """Set the head container's postStart exec command."""
    raw["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["lifecycle"]["postStart"]["exec"]["command"] = command


KUBERAY_SHAPES = [
    (lambda r: r["spec"].update(autoscalerOptions=[1]), "spec.autoscalerOptions: expected a mapping, got list"),
    (lambda r: group(r).update(template=[1]), "spec.workerGroupSpecs[0].template: expected a mapping, got list"),
    (lambda r: group(r)["template"]["spec"].update(containers=["x"]),
     "spec.workerGroupSpecs[0].template.spec.containers[0]: expected a mapping, got str"),
    (lambda r: group(r)["template"]["spec"].update(containers={"a": 1}),
     "spec.workerGroupSpecs[0].template.spec.containers: expected a list, got dict"),
    (lambda r: group(r)["template"]["spec"]["containers"][0].update(resources=[1]),
     "spec.workerGroupSpecs[0].template.spec.containers[0].resources: expected a mapping, got list"),
    (lambda r: r["spec"]["autoscalerOptions"].update(idleTimeoutSeconds=float("nan")), "idleTimeoutSeconds"),
    (lambda r: r["spec"]["autoscalerOptions"].update(idleTimeoutSeconds=True), "idleTimeoutSeconds"),
    (lambda r: group(r).update(minReplicas=True, maxReplicas=True, replicas=True), "minReplicas <= maxReplicas"),
    (lambda r: group(r).update(maxReplicas=10**12), "minReplicas <= maxReplicas"),
    (lambda r: group(r).update(maxReplicas=20_000), "as an autoscaling pool: max_nodes: Input should be less than or equal to 10000"),
    (lambda r: group(r).update(numOfHosts=4), "spec.workerGroupSpecs[0].numOfHosts: 4: multi-host groups"),
    (lambda r: group(r)["labels"].update({"deepshare.io/nic-gbps": "inf"}), "deepshare.io/nic-gbps: Input should be a finite number"),
    (lambda r: group(r)["labels"].update({"deepshare.io/pcie-switches": "999999999"}), "deepshare.io/pcie-switches"),
    # more PCIe switches than the group's GPUs: named as the label, not the pool's field
    (lambda r: group(r)["labels"].update({"deepshare.io/pcie-switches": "64"}),
     "worker type 'l4-pcie': deepshare.io/pcie-switches: at most its 4 GPUs (each switch serves a GPU), got 64"),
    (lambda r: group(r)["labels"].update({"deepshare.io/price-usd-per-hour": "inf"}), "deepshare.io/price-usd-per-hour"),
    # the monitor only mentioned, never started (a substring test said OK)
    (lambda r: head_hook(r, ["/bin/sh", "-c", "echo deepshare agents start"]), "expected the head to run `deepshare agents start"),
    (lambda r: (head_hook(r, ["true"]), r["spec"]["headGroupSpec"]["template"].setdefault("metadata", {}).update(
        annotations={"note": "deepshare agents start --address auto"})), "expected the head to run `deepshare agents start"),
    # a head container's lifecycle / postStart / exec that is not a mapping (a traceback before)
    (lambda r: head(r).update(lifecycle="postStart"),
     "spec.headGroupSpec.template.spec.containers[0].lifecycle: expected a mapping, got str"),
    (lambda r: head(r).update(lifecycle={"postStart": ["x"]}),
     "spec.headGroupSpec.template.spec.containers[0].lifecycle.postStart: expected a mapping, got list"),
    (lambda r: head(r).update(lifecycle={"postStart": {"exec": "deepshare agents start"}}),
     "spec.headGroupSpec.template.spec.containers[0].lifecycle.postStart.exec: expected a mapping, got str"),
    (lambda r: group(r)["rayStartParams"].update(resources='"{\\"deepshare_fabric_pcie\\": true}"'),
     "rayStartParams.resources: deepshare_fabric_pcie: expected a resource amount (a finite number >= 0), got True"),
    # the CRD's rayStartParams is a map of strings (kubectl refuses these): what validate said OK to
    (lambda r: group(r)["rayStartParams"].update({"num-gpus": 4}),
     "spec.workerGroupSpecs[0].rayStartParams.num-gpus: expected a string (quote it"),
    (lambda r: group(r)["rayStartParams"].update({"block": True}), "rayStartParams.block: expected a string"),
    (lambda r: group(r)["rayStartParams"].update({"num-gpus": " 4\n"}), "num-gpus: expected the GPUs per pod as a string integer"),
    (lambda r: group(r)["rayStartParams"].update({"num-gpus": "\u0664"}), "num-gpus: expected the GPUs per pod as a string integer"),
]


@pytest.mark.parametrize("change, message", KUBERAY_SHAPES, ids=[m[:48] for _, m in KUBERAY_SHAPES])
def test_a_bad_kuberay_manifest_is_one_line_naming_the_field(tmp_path, capsys, change, message):
    path = tmp_path / "k.yaml"
    path.write_text(edited(KUBERAY, change))
    with pytest.raises(DeepShareError) as info:
        parse_cluster_yaml(path.read_text(), str(path))
    assert message in str(info.value)
    for command in (["cluster", "validate", str(path)], ["cluster", "spec", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and message in err


LAUNCHER_LIMITS = [
    (lambda r: r.update(idle_timeout_minutes=float("nan")), "idle_timeout_minutes: expected minutes from 0 to 525,600 (a year), got nan"),
    (lambda r: r["available_node_types"]["a10g-pcie"].update(min_workers=9),
     "worker type 'a10g-pcie' as an autoscaling pool: <root>: Value error, min_nodes 9 exceeds max_nodes 8"),
]


@pytest.mark.parametrize("change, message", LAUNCHER_LIMITS, ids=[m[:40] for _, m in LAUNCHER_LIMITS])
def test_what_validate_accepts_converts(change, message):
    """These validated OK, then ``cluster spec`` ended in a pydantic traceback."""
    with pytest.raises(DeepShareError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_cluster_yaml(edited(AWS, change), "x.yaml")


def test_a_launcher_yamls_global_max_workers_caps_the_spec_and_the_simulated_pool():
    cluster = parse_cluster_yaml(edited(AWS, lambda r: r.update(max_workers=3)), "x.yaml")
    assert "at most 3 workers in all (max_workers)" in cluster.describe()
    spec = to_autoscale_spec(cluster)
    assert spec.max_workers == 3 and spec.node_types["a10g-pcie"].max_nodes == 8
    pool = NodePool(spec, build_slots(spec))
    assert pool.room("a10g-pcie") == 3 and pool.room("a100-nvlink") == 2
    pool.request("a10g-pcie", 0.0)
    pool.request("a10g-pcie", 0.0)
    assert pool.room("a10g-pcie") == 1 and pool.room("a100-nvlink") == 1
    pool.request("a100-nvlink", 0.0)
    assert pool.room("a10g-pcie") == 0 == pool.room("a100-nvlink")
    with pytest.raises(DeepShareError, match="no room for another 'a10g-pcie' node .*max_workers 3"):
        pool.request("a10g-pcie", 0.0)


def test_the_spec_refuses_a_global_cap_below_the_types_minimum_and_too_many_slots():
    text = AWS_MIXED.read_text()
    with pytest.raises(DeepShareError, match="max_workers: 1 is below the types' min_nodes, which add up to 2"):
        parse_autoscale_spec(text.replace("min_nodes: 0", "min_nodes: 1") + "max_workers: 1\n", "s.yaml")
    with pytest.raises(DeepShareError, match="max_nodes add up to 10,00[0-9]; the autoscaling simulator allows at most 10,000"):
        parse_autoscale_spec(text.replace("max_nodes: 8", "max_nodes: 10000"), "s.yaml")


def test_the_fixed_reference_brings_up_no_more_than_the_global_cap(tmp_path, capsys):
    spec = tmp_path / "capped.yaml"
    spec.write_text(AWS_MIXED.read_text() + "max_workers: 3\n")
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,gpus,duration_s,model,total_samples\nj1,0,4,600,ResNet18,\n")
    assert main(["autoscale", "simulate", "--trace", str(trace), "--config", str(spec), "--autoscaler", "fixed",
                 "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    # the spec's types in order, as far as the cap: 3 of the 4-GPU a10g nodes for the 600 s run
    assert report["max_nodes_up"] == 3 and report["gpu_hours"] == pytest.approx(3 * 4 * 600 / 3600)


def test_a_suspended_kuberay_group_is_refused_as_kuberay_refuses_it():
    # it was left out of the spec and validated, but KubeRay's ValidateRayClusterSpec refuses a
    # suspended worker group while enableInTreeAutoscaling is on (which this validator requires)
    with pytest.raises(DeepShareError, match=r"spec\.workerGroupSpecs\[1\]\.suspend: true: KubeRay refuses a "
                                             r"suspended worker group while enableInTreeAutoscaling is on"):
        parse_cluster_yaml(edited(KUBERAY, lambda r: group(r, 1).update(suspend=True)), "k.yaml")
    assert parse_cluster_yaml(edited(KUBERAY, lambda r: group(r, 1).update(suspend=False)), "k.yaml").workers


def _head(raw):  # type: ignore[no-untyped-def]
    return raw["spec"]["headGroupSpec"]


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(apiVersion="ray.io/v9"), "expected apiVersion ray.io/v1 and kind RayCluster"),
    (lambda r: r["metadata"].update(name="DeepShare.v1"), "metadata.name: expected a DNS-1035 label"),
    (lambda r: r["metadata"].update(name="a" * 54), "metadata.name: expected a DNS-1035 label"),
    (lambda r: group(r, 0).update(groupName="l4_pcie"), "groupName: expected a name that is a Kubernetes label"),
    (lambda r: group(r, 0).update(groupName="l4 pcie/../$(id)"), "groupName: expected a name that is a Kubernetes label"),
    (lambda r: group(r, 0).update(idleTimeoutSeconds=30), "idleTimeoutSeconds: a group's own idle timeout is not modelled"),
    (lambda r: group(r, 0)["template"]["spec"].update(containers=[]), "containers: expected the Ray container"),
    (lambda r: group(r, 0)["template"]["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
     "containers[0].resources.limits.nvidia.com/gpu: missing"),
    (lambda r: _head(r).setdefault("rayStartParams", {}).update({"num-cpus": 0}),
     "spec.headGroupSpec.rayStartParams.num-cpus: expected a string"),
    (lambda r: (_head(r).setdefault("rayStartParams", {}).update({"num-cpus": "0"}), _head(r).update(resources={"CPU": "0"})),
     "spec.headGroupSpec.resources: set resources either in rayStartParams"),
    (lambda r: _head(r).update(labels={"bad key!": "a b"}), "spec.headGroupSpec.labels"),
])
def test_a_manifest_kuberay_or_kubectl_would_refuse_is_refused(edit, words):
    # review: each validated OK, and kubectl or the KubeRay operator refuses it (or, with no GPU
    # limit, ray start advertised GPUs the pod does not have)
    with pytest.raises(DeepShareError) as refused:
        parse_cluster_yaml(edited(KUBERAY, edit), "k.yaml")
    assert words in str(refused.value)


@pytest.mark.parametrize("extra, gpus", [
    (" # was --num-gpus=1", 8),  # a comment the shell drops
    ("; echo start --num-gpus=2", 8),  # another command's words
    (" && ray start --address=x:6379 --num-gpus 4", 4),  # a second ray start, option and value apart
    ("; RAY_memory_monitor_refresh_ms=0 ray start --address=x:6379 --num-gpus=2", 2),  # after an assignment
])
def test_the_local_providers_gpus_come_from_ray_start_as_the_shell_runs_it(extra, gpus):
    raw = yaml.safe_load(LOCAL.read_text())
    commands = raw["worker_start_ray_commands"]
    index = next(i for i, c in enumerate(commands) if "--num-gpus=8" in c)
    commands[index] = commands[index] + extra
    (worker,) = parse_cluster_yaml(yaml.safe_dump(raw), "l.yaml").workers
    assert worker.gpus == gpus


def test_cluster_spec_escapes_the_file_name_in_its_header(tmp_path, capsys):
    source = tmp_path / "inj\nidle_timeout_s: 0\n#.yaml"
    source.write_text(AWS.read_text())
    out = tmp_path / "spec.yaml"
    assert main(["cluster", "spec", str(source), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.splitlines()[0].startswith("# Autoscaling spec from ") and "\\nidle_timeout_s: 0\\n" in text.splitlines()[0]
    assert parse_autoscale_spec(text).idle_timeout_s == copy.copy(to_autoscale_spec(parse_cluster_yaml(AWS.read_text(), "a")).idle_timeout_s)


def test_a_head_that_starts_the_monitor_from_its_container_command_is_valid(tmp_path):
    def change(raw):  # type: ignore[no-untyped-def]
        head_hook(raw, ["true"])
        container = raw["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        container["command"] = ["/bin/bash", "-lc"]
        container["args"] = ["ray start --head --block & sleep 10; exec deepshare agents start --address auto"]

    path = tmp_path / "k.yaml"
    path.write_text(edited(KUBERAY, change))
    assert parse_cluster_yaml(path.read_text(), str(path)).describe()


def test_an_empty_param_beside_head_resources_is_no_conflict_and_an_empty_rack_is_rack0():
    raw = edited(KUBERAY, lambda r: (_head(r).setdefault("rayStartParams", {}).update({"num-cpus": ""}),
                                     _head(r).update(resources={"CPU": "0"}),
                                     group(r, 0)["labels"].update({"deepshare.io/rack": ""})))
    assert {t.rack for t in to_autoscale_spec(parse_cluster_yaml(raw, "k.yaml")).node_types.values()} == {"rack0"}


def test_the_rack_label_the_live_scheduler_reads_is_taken_and_kept():
    # review: `deepshare.io/rack` (the live scheduler's rack level, docs/scheduler.md) was refused as
    # "rack: unknown DeepShare label", naming no label; it is the pool's rack now
    cluster = parse_cluster_yaml(edited(KUBERAY, lambda r: group(r, 0)["labels"].update({"deepshare.io/rack": "r1"})),
                                 "k.yaml")
    spec = to_autoscale_spec(cluster)
    assert spec.node_types[group(yaml.safe_load(KUBERAY.read_text()), 0)["groupName"]].rack == "r1"
    assert {t.rack for name, t in spec.node_types.items()} == {"r1", "rack0"}
