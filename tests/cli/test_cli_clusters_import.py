"""``deepshare clusters import``: a switch table or Kubernetes nodes to a cluster spec that loads
and simulates; ``deepshare clusters`` still lists the presets, now with their fabric levels."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from cli_run import cli, one_error_line

from deepshare.core.topology import load_topology

NEW_PRESETS = ("gb200-nvl72-4", "h100-leafspine-1to1", "h100-leafspine-2to1", "clos3-256")


def lingjun_table(hosts: int = 800) -> str:
    """A Lingjun ``topo.csv``: 2 DSW x 4 PSW x 12 ASW (96 ToRs, the first ``hosts % 96`` with one
    more host), ToR and PSW names repeating under different parents."""
    rows = ["ip,DSW,PSW,ASW"]
    for t in range(96):
        d, rest = divmod(t, 48)
        p, a = divmod(rest, 12)
        for h in range(hosts // 96 + (t < hosts % 96)):
            rows.append(f"10.{d}.{p * 12 + a}.{h + 1},DSW-{d},PSW-{p},ASW-{a}")
    return "\n".join(rows) + "\n"


def small_trace(capsys, folder: Path) -> Path:
    trace = folder / "t.csv"
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 30, "--rate", 0.02, "--seed", 1, "--out", trace)
    assert (rc, err) == (0, ""), err
    return trace


def simulate(capsys, cluster: Path | str, trace: Path) -> dict:
    rc, out, err = cli(capsys, "simulate", "--cluster", cluster, "--trace", trace, "--policy", "srsf+packed", "--json", "-")
    assert rc == 0, err
    return json.loads(out)


def test_an_800_host_lingjun_table_imports_loads_and_simulates(capsys, tmp_path):
    table = tmp_path / "topo.csv"
    table.write_text(lingjun_table())
    spec = tmp_path / "lingjun.yaml"
    rc, out, err = cli(capsys, "clusters", "import", table, "--gpus-per-node", 8, "--oversubscription", "PSW=4",
                       "--out", spec)
    assert (rc, err) == (0, ""), err
    assert out.strip() == f"wrote {spec}: 800 nodes, 6400 GPUs; fabric ASW (96) < PSW (8) < DSW (2)"
    topo = load_topology(str(spec))
    assert topo.name == "topo"  # the table's file name
    assert [n.name for n in topo.nodes] == [line.split(",")[0] for line in lingjun_table().splitlines()[1:]]
    assert [lv.name for lv in topo.fabric.levels] == ["ASW", "PSW", "DSW"]
    report = simulate(capsys, spec, small_trace(capsys, tmp_path))
    assert report["jobs"] == 30 and report["finished"] + report["rejected"] == 30 and report["finished"] > 0


def test_kubectl_nodes_import_loads_and_simulates(capsys, tmp_path):
    def node(name: str, clique: str, rack: str) -> dict:
        return {"kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": clique,
                                                                      "topology.kubernetes.io/rack": rack}},
                "status": {"capacity": {"cpu": "144", "nvidia.com/gpu": "4"}}}

    items = [node(f"gb200-{r}-{i}", f"uuid{r}.0", f"rack{r // 2}") for r in range(4) for i in range(18)]
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    spec = tmp_path / "k8s.yaml"
    rc, out, err = cli(capsys, "clusters", "import", nodes, "--level", "nvlink_domain=nvidia.com/gpu.clique",
                       "--level", "leaf=topology.kubernetes.io/rack", "--nvlink", "nvlink_domain",
                       "--node-type", "name=gb200", "--node-type", "gpu_model=B200", "--node-type", "nic_gbps=1600",
                       "--node-type", "nvlink_gbps=7200", "--oversubscription", "leaf=1", "--name", "nvl", "--out", spec)
    assert (rc, err) == (0, ""), err
    assert out.strip() == f"wrote {spec}: 72 nodes, 288 GPUs; fabric nvlink_domain (4) < leaf (2)"
    topo = load_topology(str(spec))
    assert topo.name == "nvl" and topo.nodes[0].name == "gb200-0-0" and topo.nodes[0].gpus == 4
    assert topo.fabric.nvlink_level == 0
    assert [topo.fabric.domains[d].uplink_gbps for d in topo.fabric.by_level[1]] == [36 * 1600.0, 36 * 1600.0]
    report = simulate(capsys, spec, small_trace(capsys, tmp_path))
    assert report["jobs"] == 30 and report["finished"] + report["rejected"] == 30



def test_node_types_are_the_ones_used_named_after_their_gpu_model(capsys, tmp_path):
    """Only the GPU counts the hosts have get a node type; with ``gpu_model`` given and no
    ``name``, the type is named after the model (not ``h100`` for B200 nodes); a type of fewer
    GPUs than the default's switches has one PCIe switch per GPU."""
    items = [{"kind": "Node", "metadata": {"name": f"n{i}", "labels": {"example.com/rack": "r0"}},
              "status": {"capacity": {"nvidia.com/gpu": str(gpus)}}} for i, gpus in enumerate((4, 4, 2))]
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "List", "items": items}))
    spec = tmp_path / "k8s.yaml"
    rc, out, err = cli(capsys, "clusters", "import", nodes, "--level", "leaf=example.com/rack",
                       "--node-type", "gpu_model=B200", "--out", spec)
    assert (rc, err) == (0, ""), err
    types = yaml.safe_load(spec.read_text())["node_types"]
    assert sorted(types) == ["b200-2gpu", "b200-4gpu"]
    assert {name: (t["gpus"], t["gpu_model"], t["pcie_switches"]) for name, t in types.items()} == {
        "b200-4gpu": (4, "B200", 4), "b200-2gpu": (2, "B200", 2)}
    assert [n.gpus for n in load_topology(str(spec)).nodes] == [4, 4, 2]
    rc, out, err = cli(capsys, "clusters", "import", nodes, "--level", "leaf=example.com/rack", "--gpus-per-node", 4,
                       "--out", spec)
    assert (rc, err) == (0, ""), err
    assert sorted(yaml.safe_load(spec.read_text())["node_types"]) == ["h100", "h100-2gpu"]

def test_without_out_the_spec_is_printed(capsys, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("host,leaf\nyes,l0\n1e3,l1\n")
    rc, out, err = cli(capsys, "clusters", "import", table)
    assert (rc, err) == (0, "")
    spec = yaml.safe_load(out)
    assert spec["name"] == "t" and [g["names"] for g in spec["nodes"]] == [["yes"], ["1e3"]]


def test_the_table_can_come_from_standard_input(capsys, monkeypatch, tmp_path):
    doc = {"kind": "List", "items": [{"metadata": {"name": f"n{i}", "labels": {"rack": f"r{i // 2}"}},
                                      "status": {"capacity": {"nvidia.com/gpu": "8"}}} for i in range(4)]}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(doc).encode())))
    spec = tmp_path / "s.yaml"
    rc, out, err = cli(capsys, "clusters", "import", "-", "--level", "leaf=rack", "--uplink-gbps", "leaf=800", "--out", spec)
    assert (rc, err) == (0, ""), err
    topo = load_topology(str(spec))
    assert topo.name == "imported" and [n.name for n in topo.nodes] == ["n0", "n1", "n2", "n3"]
    assert [d.uplink_gbps for d in topo.fabric.domains] == [800.0, 800.0]


@pytest.mark.parametrize("text,extra,needles", [
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,p0\n", [], ["t.csv line 2: expected 4 fields (ip, DSW, PSW, ASW), got 3"]),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,,a0\n", [], ["t.csv line 2, column PSW: empty switch name"]),
    ("ip,DSW\nh,d0\nh,d1\n", [], ["t.csv line 3: host 'h' is also on line 2"]),
    ("ip,DSW\nh,d0\n", ["--oversubscription", "DSW=x"], ["--oversubscription DSW=x: expected a ratio"]),
    ("ip,DSW\nh,d0\n", ["--level", "leaf=rack"], ["--level is for Kubernetes node JSON"]),
    ('{"kind": "List", "items": [{"metadata": {"name": "n1", "labels": {}}}]}', ["--level", "leaf=rack"],
     ["t.csv: items[0] (node 'n1'): metadata.labels: no label 'rack' (--level leaf=rack)"]),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, text, extra, needles):
    table = tmp_path / "t.csv"
    table.write_text(text)
    out_path = tmp_path / "spec.yaml"
    rc, out, err = cli(capsys, "clusters", "import", table, "--out", out_path, *extra)
    assert rc == 2 and out == ""
    one_error_line(err, *needles)
    assert not out_path.exists()


def test_the_output_may_not_overwrite_the_input_and_the_input_must_exist(capsys, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("ip,DSW\nh,d0\n")
    rc, out, err = cli(capsys, "clusters", "import", table, "--out", table)
    assert rc == 2
    one_error_line(err, "is the input TABLE")
    assert table.read_text() == "ip,DSW\nh,d0\n"
    rc, out, err = cli(capsys, "clusters", "import", tmp_path / "missing.csv", "--out", tmp_path / "s.yaml")
    assert rc == 2
    one_error_line(err, "missing.csv")
    rc, out, err = cli(capsys, "clusters", "import", table, "--gpus-per-node", 0)
    assert rc == 2 and "--gpus-per-node" in err


def test_clusters_still_lists_the_presets_with_their_levels(capsys):
    rc, out, err = cli(capsys, "clusters")
    assert (rc, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert {"testbed", "h100-64", *NEW_PRESETS} <= set(lines)
    assert "fabric nvlink_domain (4) < leaf (2) < spine (1)" in lines["gb200-nvl72-4"]
    assert "4 nodes, 32 GPUs" in lines["testbed"] and "fabric rack (1)" in lines["testbed"]
    rc, out, err = cli(capsys, "clusters", "--json", "-")
    assert (rc, err) == (0, "")
    doc = {row["name"]: row for row in json.loads(out)}
    assert doc["clos3-256"]["levels"] == [{"name": "leaf", "domains": 16}, {"name": "aggregation", "domains": 4},
                                          {"name": "core", "domains": 1}]
    assert doc["clos3-256"]["gpus"] == 2048


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_each_new_preset_simulates(capsys, name):
    report = simulate(capsys, name, Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces"
                      / "deepshare-simulate-trace0.json")
    assert report["finished"] + report["rejected"] == report["jobs"] > 0


def test_import_help_has_an_example(capsys):
    rc, out, err = cli(capsys, "clusters", "import", "--help")
    assert rc == 0
    assert "deepshare clusters import topo.csv" in out and "--level nvlink_domain=nvidia.com/gpu.clique" in out
