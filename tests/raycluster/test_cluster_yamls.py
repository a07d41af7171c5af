"""Every shipped cluster YAML validates (Ray's schema + the project's keys); every bad edit is named."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from deepshare.raycluster.cluster_yaml import load_cluster_yaml, parse_cluster_yaml, to_autoscale_spec
from deepshare.cli import main
from deepshare.core.autoscaling import parse_autoscale_spec
from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
YAMLS = sorted((ROOT / "cluster_yamls").glob("*.yaml"))
AWS = ROOT / "cluster_yamls" / "aws-gpu-mixed.yaml"
LOCAL = ROOT / "cluster_yamls" / "local-onprem.yaml"
KUBERAY = ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml"


def test_the_four_kinds_of_cluster_yaml_ship():
    assert {p.name for p in YAMLS} >= {"aws-gpu-mixed.yaml", "gcp-a100-h100.yaml", "local-onprem.yaml", "kuberay-autoscaling.yaml"}


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_every_shipped_yaml_validates_and_says_how_to_launch_and_what_it_costs(path):
    cluster = load_cluster_yaml(path)
    assert cluster.workers and all(w.gpus > 0 and w.max_nodes >= 1 for w in cluster.workers)
    header = path.read_text().split("\n\n")[0].lower()
    assert "launch" in header and "cost per hour" in header and "$" in header
    spec = to_autoscale_spec(cluster)  # the simulator can model every one of them
    assert set(spec.node_types) == {w.name for w in cluster.workers}


def test_aws_worker_types_carry_fabric_nic_and_price():
    cluster = load_cluster_yaml(AWS)
    by_name = {w.name: w for w in cluster.workers}
    a10g, a100 = by_name["a10g-pcie"], by_name["a100-nvlink"]
    assert (a10g.gpus, a10g.hardware.fabric, a10g.hardware.nic, a10g.hardware.price_usd_per_hour) == (4, "pcie", "ethernet", 5.672)
    assert (a100.gpus, a100.hardware.fabric, a100.hardware.nic, a100.hardware.nic_gbps) == (8, "nvlink", "efa", 400.0)
    assert (a10g.min_nodes, a10g.max_nodes, a100.max_nodes) == (0, 8, 2)
    spec = to_autoscale_spec(cluster)
    assert spec.idle_timeout_s == 300.0
    assert spec.node_types["a100-nvlink"].provisioning_s == 420.0


def test_local_cluster_reads_its_one_node_type_from_the_ray_start_command():
    (w,) = load_cluster_yaml(LOCAL).workers
    assert (w.name, w.gpus, w.min_nodes, w.max_nodes, w.hardware.nic) == ("local", 8, 4, 4, "infiniband")


def test_cli_validates_all_shipped_yamls(capsys):
    assert main(["cluster", "validate", *map(str, YAMLS)]) == 0
    out = capsys.readouterr().out
    assert out.count("OK ") == len(YAMLS)


DLAMI_SSM = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


def test_aws_nodes_boot_a_current_ubuntu_22_04_dlami_not_rays_latest_dlami():
    """Ray maps ``latest_dlami`` to a past-end-of-life Ubuntu 18.04 DLAMI; every node type names
    AWS's SSM parameter of the current Ubuntu 22.04 base DLAMI (EC2 resolves it at launch), and
    the header says how to pin and refresh it."""
    import ray.autoscaler

    ray_aws = (Path(ray.autoscaler.__file__).parent / "_private" / "aws" / "config.py").read_text()  # (needs boto3 to import)
    assert 'DEFAULT_AMI_NAME = "AWS Deep Learning AMI (Ubuntu 18.04) V71.0"' in ray_aws  # why latest_dlami is not used
    raw = yaml.safe_load(AWS.read_text())
    images = {name: node["node_config"]["ImageId"] for name, node in raw["available_node_types"].items()}
    assert set(images.values()) == {DLAMI_SSM}, images
    text = AWS.read_text()
    assert "latest_dlami" not in text.replace("Ray's own `latest_dlami`", "")
    assert "aws ssm get-parameter" in text and DLAMI_SSM.removeprefix("resolve:ssm:") in text
    setup = " ".join(raw["setup_commands"])
    assert "python3 -m pip install" in setup and "python -m" not in setup  # the base DLAMI has python3 only


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_every_head_offers_no_cpus_to_training(path):
    """cluster_yamls/README.md: heads have CPU 0, so no rollout worker or training task lands there."""
    raw = yaml.safe_load(path.read_text())
    if raw.get("kind") == "RayCluster":
        assert raw["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    elif raw["provider"]["type"] == "local":
        (start,) = [c for c in raw["head_start_ray_commands"] if "ray start --head" in c]
        assert "--num-cpus=0" in start.split()
    else:
        assert raw["available_node_types"][raw["head_node_type"]]["resources"]["CPU"] == 0


def test_cli_validate_names_the_placeholders_left_to_fill_in(capsys):
    gcp = ROOT / "cluster_yamls" / "gcp-a100-h100.yaml"
    assert main(["cluster", "validate", str(gcp), str(AWS)]) == 0  # valid files: only a warning
    captured = capsys.readouterr()
    assert captured.out.count("OK ") == 2
    assert captured.err.splitlines() == [
        f"deepshare: warning: {gcp}: provider.project_id is the placeholder 'YOUR-GCP-PROJECT': replace it before launching"]
    assert load_cluster_yaml(AWS).placeholders == ()
    assert load_cluster_yaml(KUBERAY).placeholders[0] == (
        "spec.headGroupSpec.template.spec.containers[0].image", "REGISTRY/deepshare:0.1.0-gpu")


def test_cli_cluster_spec_writes_a_spec_the_simulator_loads(tmp_path, capsys):
    out = tmp_path / "spec.yaml"
    assert main(["cluster", "spec", str(AWS), "--out", str(out)]) == 0
    spec = parse_autoscale_spec(out.read_text())
    assert spec.node_types["a10g-pcie"].price_usd_per_hour == 5.672 and spec.node_types["a10g-pcie"].max_nodes == 8


def _edit(path: Path, change) -> str:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(path.read_text())
    change(raw)
    return yaml.safe_dump(raw)


def _nt(raw, name="a100-nvlink"):  # type: ignore[no-untyped-def]
    return raw["available_node_types"][name]


AWS_BAD = [
    (lambda r: r.update(bogus_key=1), "bogus_key"),
    (lambda r: _nt(r).update(min_workers="two"), "available_node_types.a100-nvlink.min_workers"),
    (lambda r: _nt(r)["labels"].pop("deepshare.io/fabric"), "deepshare.io/fabric"),
    (lambda r: _nt(r)["labels"].update({"deepshare.io/fabric": "ethernet"}), "deepshare.io/fabric"),
    (lambda r: _nt(r)["labels"].update({"deepshare.io/nic-gbps": "fast"}), "deepshare.io/nic-gbps"),
    (lambda r: _nt(r)["labels"].update({"deepshare.io/colour": "red"}), "unknown DeepShare label"),
    (lambda r: _nt(r).update(labels={}), "needs deepshare.io/* labels"),
    (lambda r: _nt(r)["resources"].pop("deepshare_fabric_nvlink"), "deepshare_fabric_nvlink"),
    (lambda r: _nt(r)["resources"].update(deepshare_fabric_pcie=1), "deepshare_fabric_nvlink"),
    (lambda r: _nt(r)["resources"].update(deepshare_fabric_nvlink=True), "deepshare_fabric_nvlink: True is not of type 'integer'"),
    (lambda r: r.update(head_start_ray_commands=["ray start --head"]), "head_start_ray_commands"),
    (lambda r: r.update(setup_commands=["echo hi"]), "pip install"),
    # mentions that run nothing (a substring test said OK to them)
    (lambda r: r.update(setup_commands=["echo pip install deepshare"]), "pip install"),
    (lambda r: r.update(setup_commands=["pip install numpy  # then deepshare"]), "pip install"),
    (lambda r: r.update(head_start_ray_commands=["ray start --head # deepshare agents start --address auto"]),
     "head_start_ray_commands: expected `deepshare agents start"),
    (lambda r: r.update(head_start_ray_commands=["ray start --head", "echo deepshare agents start"]),
     "head_start_ray_commands: expected `deepshare agents start"),
    (lambda r: r.update(head_node_type="nope"), "head_node_type"),
    (lambda r: _nt(r).update(min_workers=20), "max_workers"),
    (lambda r: r.update(provider="aws"), "provider"),
    # Ray's schema takes any integer: float() of a 400-digit one overflowed (a traceback)
    (lambda r: r.update(idle_timeout_minutes=10**400), "idle_timeout_minutes: expected minutes from 0 to 525,600"),
    (lambda r: r.update(idle_timeout_minutes=525_601), "idle_timeout_minutes: expected minutes from 0 to 525,600"),
]


@pytest.mark.parametrize("change, needle", AWS_BAD, ids=[n for _, n in AWS_BAD])
def test_bad_aws_yaml_edits_are_named(change, needle):
    with pytest.raises(DeepShareError, match=needle.replace(".", r"\.").replace("*", r"\*")):
        parse_cluster_yaml(_edit(AWS, change), "x.yaml")


def test_unquoted_numeric_label_is_named():
    text = AWS.read_text().replace('deepshare.io/nic-gbps: "400"', "deepshare.io/nic-gbps: 400")
    with pytest.raises(DeepShareError, match="nic-gbps.*string"):
        parse_cluster_yaml(text, "x.yaml")


def _kr_group(raw, i=1):  # type: ignore[no-untyped-def]
    return raw["spec"]["workerGroupSpecs"][i]


KUBERAY_BAD = [
    (lambda r: r.update(kind="Deployment"), "kind RayCluster"),
    (lambda r: r["spec"].update(enableInTreeAutoscaling=False), "enableInTreeAutoscaling"),
    (lambda r: _kr_group(r).update(minReplicas=3, maxReplicas=2), r"workerGroupSpecs\[1\]"),
    (lambda r: _kr_group(r).update(replicas=5), r"workerGroupSpecs\[1\]\.replicas"),
    (lambda r: _kr_group(r)["rayStartParams"].pop("resources"), r"rayStartParams\.resources"),
    (lambda r: _kr_group(r).update(labels={"deepshare.io/fabric": "nvlink"}), "gpu-model"),
    (lambda r: _kr_group(r)["rayStartParams"].update(labels="deepshare.io/fabric=nvlink"), r"rayStartParams\.labels.*top-level labels"),
    (lambda r: _kr_group(r)["rayStartParams"].update({"num-gpus": "4"}), "nvidia.com/gpu"),
    (lambda r: r["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("lifecycle"), "headGroupSpec"),
    (lambda r: r["spec"].update(workerGroupSpecs=[]), "workerGroupSpecs"),
]


@pytest.mark.parametrize("change, needle", KUBERAY_BAD, ids=[n for _, n in KUBERAY_BAD])
def test_bad_kuberay_edits_are_named(change, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_cluster_yaml(_edit(KUBERAY, change), "k.yaml")


@pytest.mark.parametrize(
    "old, new, needle",
    [
        ("deepshare.io/fabric=pcie", "deepshare.io/fabric=copper", "deepshare.io/fabric"),
        ("--num-gpus=8\n", "\n", "num-gpus"),
        ('{"deepshare_fabric_pcie": 1}', '{"deepshare_fabric_nvlink": 1}', "deepshare_fabric_pcie"),
        ("worker_ips: [10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.14]", "worker_ips: []", "worker_ips"),
        ("worker_ips: [10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.14]", "worker_ips: [10.0.0.11, 10.0.0.11, 10.0.0.12]",
         r"provider\.worker_ips: 10\.0\.0\.11 listed more than once"),
        ('{"deepshare_fabric_pcie": 1}', '{"deepshare_fabric_pcie": 1, "x": NaN}',
         r"x: expected a resource amount \(a finite number >= 0\), got nan"),
        ('{"deepshare_fabric_pcie": 1}', '{"deepshare_fabric_pcie": 1, "x": 1e999}', "x: expected a resource amount"),
        ('{"deepshare_fabric_pcie": 1}', '{"deepshare_fabric_pcie": 1, "x": -2}', "x: expected a resource amount"),
        ("--labels='deepshare.io/gpu-model=RTX-6000-Ada,", "--labels='deepshare.io/fabric=nvlink,deepshare.io/gpu-model=RTX-6000-Ada,",
         "label 'deepshare.io/fabric' is given twice"),
    ],
)
def test_bad_local_edits_are_named(old, new, needle):
    text = LOCAL.read_text()
    assert old in text
    with pytest.raises(DeepShareError, match=needle):
        parse_cluster_yaml(text.replace(old, new), "l.yaml")


def test_local_provider_rejects_node_types():
    raw = yaml.safe_load(LOCAL.read_text())
    raw["available_node_types"] = copy.deepcopy(yaml.safe_load(AWS.read_text())["available_node_types"])
    with pytest.raises(DeepShareError, match="available_node_types.*local"):
        parse_cluster_yaml(yaml.safe_dump(raw), "l.yaml")


def test_a_key_ray_needs_is_named_as_missing_not_quoted_bare():
    external = {
        "cluster_name": "ext", "max_workers": 2, "head_node_type": "head",
        "provider": {"type": "external", "module": "mypkg.provider.MyProvider"},
        "available_node_types": {
            "head": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "gpu": {"resources": {"CPU": 8, "GPU": 4}, "node_config": {}, "min_workers": 0, "max_workers": 2},
        },
    }
    with pytest.raises(DeepShareError) as info:  # Ray's prepare_config reads it without a default
        parse_cluster_yaml(yaml.safe_dump(external), "ext.yaml")
    assert str(info.value) == "ext.yaml: Ray rejects the config: it expects the key 'setup_commands', which is missing"


def test_cli_names_each_bad_file_on_one_line_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster_name: x\nprovider: {type: aws, region: us-east-1}\nbogus: 1\n")
    junk = tmp_path / "junk.yaml"
    junk.write_text("a: [1, 2\n")
    assert main(["cluster", "validate", str(AWS), str(bad), str(junk), str(tmp_path / "missing.yaml")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 3 and "bad.yaml" in lines[0] and "bogus" in lines[0]
    assert "junk.yaml: not valid YAML" in lines[1] and "missing.yaml: file not found" in lines[2]
    assert "Traceback" not in captured.err and captured.out.count("OK ") == 1
