"""Cluster specs from a Lingjun-style switch table or Kubernetes nodes (:mod:`deepshare.core.fabric_import`)."""

from __future__ import annotations

import json

import pytest
import yaml

from deepshare.core.errors import DeepShareError
from deepshare.core.fabric_import import (
    DEFAULT_NODE_TYPE, import_cluster, is_json, node_type, parse_hosts, parse_kubectl_nodes, parse_switch_table,
)
from deepshare.core.topology import parse_topology

TABLE = """\
ip,DSW,PSW,ASW
10.0.0.1,dsw0,psw0,asw0
10.0.0.2,dsw0,psw0,asw0
10.0.1.1,dsw0,psw1,asw0
10.1.0.1,dsw1,psw0,asw0
"""
"""Four hosts; asw0 and psw0 repeat under different parents: three ToRs, three PSWs, two DSWs."""


def lingjun_table(dsw: int = 2, psw: int = 4, asw: int = 12, hosts: int = 800) -> str:
    """A Lingjun ``topo.csv`` of ``hosts`` hosts spread over ``dsw x psw x asw`` ToRs (the first ones
    get one more), switch names repeating under different parents (``ASW-0`` under every PSW)."""
    tors = dsw * psw * asw
    rows = ["ip,DSW,PSW,ASW"]
    for t in range(tors):
        d, rest = divmod(t, psw * asw)
        p, a = divmod(rest, asw)
        for h in range(hosts // tors + (t < hosts % tors)):
            rows.append(f"10.{d}.{p * asw + a}.{h + 1},DSW-{d},PSW-{p},ASW-{a}")
    return "\n".join(rows) + "\n"


def nodes_json(*nodes: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(nodes)})


def k8s_node(name: str, labels: dict, gpus: object = None) -> dict:
    node: dict = {"kind": "Node", "metadata": {"name": name, "labels": labels},
                  "status": {"capacity": {"cpu": "96", "memory": "2Ti"}}}
    if gpus is not None:
        node["status"]["capacity"]["nvidia.com/gpu"] = gpus
    return node


def test_switch_table_levels_are_named_after_the_header_lowest_first():
    table = parse_switch_table(TABLE, "topo.csv")
    assert table.kind == "switch table"
    assert table.levels == ("ASW", "PSW", "DSW")
    assert [(h.name, h.domains, h.gpus) for h in table.hosts] == [
        ("10.0.0.1", ("asw0", "psw0", "dsw0"), None), ("10.0.0.2", ("asw0", "psw0", "dsw0"), None),
        ("10.0.1.1", ("asw0", "psw1", "dsw0"), None), ("10.1.0.1", ("asw0", "psw0", "dsw1"), None),
    ]


def test_import_keeps_host_ids_and_identifies_switches_by_path():
    imported = import_cluster(TABLE, "topo.csv", name="lj", oversubscription=["PSW=2"], uplink_gbps=["ASW=1000"])
    topo = imported.topology
    assert topo.name == "lj"
    assert [n.name for n in topo.nodes] == ["10.0.0.1", "10.0.0.2", "10.0.1.1", "10.1.0.1"]
    fabric = topo.fabric
    assert [lv.name for lv in fabric.levels] == ["ASW", "PSW", "DSW"]
    assert [(d.name, d.nodes, d.uplink_gbps) for d in fabric.domains] == [
        ("dsw0/psw0/asw0", (0, 1), 1000.0), ("dsw0/psw0", (0, 1), 2 * 3200 / 2), ("dsw0", (0, 1, 2), 0.0),
        ("dsw0/psw1/asw0", (2,), 1000.0), ("dsw0/psw1", (2,), 3200 / 2),
        ("dsw1/psw0/asw0", (3,), 1000.0), ("dsw1/psw0", (3,), 3200 / 2), ("dsw1", (3,), 0.0),
    ]
    node = topo.nodes[0]
    assert {k: getattr(node, k) for k in DEFAULT_NODE_TYPE} == {k: v for k, v in DEFAULT_NODE_TYPE.items()}
    # consecutive hosts under the same switches are one group, with their exact names
    spec = yaml.safe_load(imported.yaml)
    assert [(g["count"], g["names"]) for g in spec["nodes"]] == [
        (2, ["10.0.0.1", "10.0.0.2"]), (1, ["10.0.1.1"]), (1, ["10.1.0.1"])]
    assert spec["levels"] == [{"name": "ASW", "uplink_gbps": 1000}, {"name": "PSW", "oversubscription": 2}, {"name": "DSW"}]
    assert imported.yaml.startswith("# Imported by `deepshare clusters import` from topo.csv (switch table)")


def test_an_800_host_lingjun_table():
    text = lingjun_table()
    assert text.count("\n") == 801
    imported = import_cluster(text, "topo.csv", name="lingjun", oversubscription=["PSW=4"])
    topo = imported.topology
    assert (len(topo.nodes), topo.total_gpus) == (800, 6400)
    fabric = topo.fabric
    assert [len(level) for level in fabric.by_level] == [96, 8, 2]  # ASW-0..11 under each of 8 PSWs: 96 ToRs
    sizes = sorted(len(fabric.domains[d].nodes) for d in fabric.by_level[0])
    assert sizes == [8] * 64 + [9] * 32
    # the first 32 ToRs have 9 hosts: the PSWs hold 12 x 9, 12 x 9, 8 x 9 + 4 x 8, then 12 x 8 hosts
    psw_hosts = [len(fabric.domains[d].nodes) for d in fabric.by_level[1]]
    assert psw_hosts == [108, 108, 104, 96, 96, 96, 96, 96]
    assert [fabric.domains[d].uplink_gbps for d in fabric.by_level[1]] == [n * 3200 / 4 for n in psw_hosts]
    assert [n.name for n in topo.nodes] == [line.split(",")[0] for line in text.splitlines()[1:]]
    assert len(yaml.safe_load(imported.yaml)["nodes"]) == 96
    assert parse_topology(imported.yaml).fabric == fabric  # what is written loads as imported


@pytest.mark.parametrize("host", ["yes", "1e3", "10.0", "0x10", "null", "~", "007", "- a", "a: b", "#x", "é-1", "[a]"])
def test_host_ids_that_look_like_other_yaml_stay_strings(host):
    imported = import_cluster(f"host,leaf\n{host},l0\nplain-host,l0\n", "t.csv", name="odd")
    assert [n.name for n in imported.topology.nodes] == [host, "plain-host"]


def test_names_must_be_unique_per_host_and_node_names_are_case_sensitive():
    imported = import_cluster("host,leaf\nNode1,l0\nnode1,l0\n", "t.csv", name="c")
    assert [n.name for n in imported.topology.nodes] == ["Node1", "node1"]


@pytest.mark.parametrize("text,message", [
    ("", "t.csv: empty; expected a header"),
    ("\n\n", "t.csv: empty; expected a header"),
    ("ip\n10.0.0.1\n", "t.csv line 1: expected a host column and at least one switch column"),
    ("ip,DSW,,ASW\n", "t.csv line 1, column 3: empty column name"),
    ("ip,SW,SW\n", "t.csv line 1: column 'SW' is both column 2 and column 3"),
    ("ip,DSW/x\n", "t.csv line 1, column 2: column name 'DSW/x' must be"),
    ("ip,DSW,PSW,ASW\n", "t.csv: no hosts after the header (line 1)"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,p0\n", "t.csv line 2: expected 4 fields (ip, DSW, PSW, ASW), got 3"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,p0,a0,x\n", "t.csv line 2: expected 4 fields (ip, DSW, PSW, ASW), got 5"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,,a0\n", "t.csv line 2, column PSW: empty switch name"),
    ("ip,DSW,PSW,ASW\n  ,d0,p0,a0\n", "t.csv line 2, column ip: empty host id"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,p/0,a0\n", "t.csv line 2, column PSW: switch name 'p/0' must be"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d0,p\u202e0,a0\n", "t.csv line 2, column PSW: switch name 'p\\u202e0' must be"),
    ("ip,DSW,PSW,ASW\n10.0.0.1,d\x7f0,p0,a0\n", "t.csv line 2, column DSW: switch name 'd\\x7f0' must be"),
    ("ip,DSW,PSW,ASW\n\n10.0.0.1,d0,p0,a0\n10.0.0.2,d0,p0,a0\n10.0.0.1,d0,p1,a0\n",
     "t.csv line 5: host '10.0.0.1' is also on line 3 (or one that shows alike); each host once"),
])
def test_switch_table_errors_name_the_line_and_column(text, message):
    with pytest.raises(DeepShareError) as info:
        parse_hosts(text, "t.csv")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_table_with_a_byte_order_mark_and_crlf_lines():
    table = parse_switch_table("\ufeffip,ASW\r\nh1,a0\r\nh2,a1\r\n", "t.csv")
    assert table.levels == ("ASW",) and [h.name for h in table.hosts] == ["h1", "h2"]


def test_format_is_detected_from_the_content():
    assert is_json('  {"items": []}') and is_json("[]") and not is_json("ip,DSW\n")
    with pytest.raises(DeepShareError, match="--level is for Kubernetes node JSON"):
        parse_hosts(TABLE, "t.csv", [("leaf", "topology.kubernetes.io/rack")])
    with pytest.raises(DeepShareError, match=r"Kubernetes node JSON needs the levels: --level NAME=LABEL_KEY"):
        parse_hosts(nodes_json(k8s_node("a", {})), "n.json")


LEVELS = [("nvlink_domain", "nvidia.com/gpu.clique"), ("leaf", "topology.kubernetes.io/rack")]


def test_kubectl_nodes():
    text = nodes_json(
        k8s_node("gpu-a", {"nvidia.com/gpu.clique": "c1.0", "topology.kubernetes.io/rack": "r0"}, "4"),
        k8s_node("gpu-b", {"nvidia.com/gpu.clique": "c1.0", "topology.kubernetes.io/rack": "r0"}, "4"),
        k8s_node("gpu-c", {"nvidia.com/gpu.clique": "c1.1", "topology.kubernetes.io/rack": "r0"}, 8),
        k8s_node("gpu-d", {"nvidia.com/gpu.clique": "c1.0", "topology.kubernetes.io/rack": "r1"}),
    )
    table = parse_kubectl_nodes(text, "n.json", LEVELS)
    assert table.kind == "kubectl nodes" and table.levels == ("nvlink_domain", "leaf")
    assert [(h.name, h.domains, h.gpus) for h in table.hosts] == [
        ("gpu-a", ("c1.0", "r0"), 4), ("gpu-b", ("c1.0", "r0"), 4), ("gpu-c", ("c1.1", "r0"), 8),
        ("gpu-d", ("c1.0", "r1"), None)]
    imported = import_cluster(text, "n.json", name="k8s", levels=[f"{n}={k}" for n, k in LEVELS],
                              nvlink="nvlink_domain", gpus_per_node=2, oversubscription=["leaf=2"])
    topo = imported.topology
    assert [(n.name, n.gpus, n.node_type) for n in topo.nodes] == [
        ("gpu-a", 4, "h100-4gpu"), ("gpu-b", 4, "h100-4gpu"), ("gpu-c", 8, "h100-8gpu"), ("gpu-d", 2, "h100")]
    fabric = topo.fabric
    assert fabric.nvlink_level == 0
    assert [(d.name, d.nodes, d.uplink_gbps) for d in fabric.domains] == [
        ("r0/c1.0", (0, 1), 0.0), ("r0", (0, 1, 2), 3 * 3200 / 2), ("r0/c1.1", (2,), 0.0),
        ("r1/c1.0", (3,), 0.0), ("r1", (3,), 3200 / 2)]  # clique c1.0 under r1 is another domain


def test_one_kubectl_node_object():
    text = json.dumps(k8s_node("solo", {"rack": "r0"}, "8"))
    table = parse_kubectl_nodes(text, "n.json", [("leaf", "rack")])
    assert [(h.name, h.domains, h.gpus) for h in table.hosts] == [("solo", ("r0",), 8)]


@pytest.mark.parametrize("doc,message", [
    ({"kind": "List", "items": []}, "n.json: items: no nodes"),
    ({"kind": "Pod"}, "n.json: expected Kubernetes nodes"),
    ({"items": [7]}, "n.json: items[0]: expected a Node object, got int"),
    ({"items": [{"status": {}}]}, "n.json: items[0]: metadata: missing"),
    ({"items": [{"metadata": {"labels": {}}}]}, "n.json: items[0]: metadata.name: missing"),
    ({"items": [{"metadata": {"name": 5}}]}, "n.json: items[0]: metadata.name: expected a string, got int"),
    ({"items": [{"metadata": {"name": "a/b"}}]}, "n.json: items[0]: metadata.name: node name 'a/b' must be"),
    ({"items": [k8s_node("a", {"rack": "r0"}), k8s_node("a", {"rack": "r1"})]},
     "n.json: items[1] (node 'a'): also items[0] (or a name that shows alike); each node once"),
    ({"items": [k8s_node("a", {"rack": "r0"}), k8s_node("b", {})]},
     "n.json: items[1] (node 'b'): metadata.labels: no label 'rack' (--level leaf=rack)"),
    ({"items": [k8s_node("a", {"rack": ""})]}, "n.json: items[0] (node 'a'): metadata.labels['rack']: empty value"),
    ({"items": [k8s_node("a", {"rack": 3})]}, "n.json: items[0] (node 'a'): metadata.labels['rack']: expected a string"),
    ({"items": [k8s_node("a", {"rack": "r0"}, "eight")]},
     "n.json: items[0] (node 'a'): status.capacity['nvidia.com/gpu']: expected a GPU count from 1 to 1024, got 'eight'"),
    ({"items": [k8s_node("a", {"rack": "r0"}, "0")]}, "status.capacity['nvidia.com/gpu']: expected a GPU count"),
    ({"items": [k8s_node("a", {"rack": "r0"}, True)]}, "status.capacity['nvidia.com/gpu']: expected a GPU count"),
])
def test_kubectl_errors_name_the_node_and_field(doc, message):
    with pytest.raises(DeepShareError) as info:
        parse_kubectl_nodes(json.dumps(doc), "n.json", [("leaf", "rack")])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_level_given_twice_is_an_error():
    with pytest.raises(DeepShareError, match="--level: level 'leaf' given twice"):
        parse_kubectl_nodes(nodes_json(k8s_node("a", {"r": "r0"})), "n.json", [("leaf", "r"), ("leaf", "s")])


def test_bad_json_is_one_line():
    with pytest.raises(DeepShareError) as info:
        parse_hosts('{"items": [', "n.json", [("leaf", "rack")])
    assert str(info.value).startswith("n.json") and "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs,message", [
    ({"oversubscription": ["PSW"]}, "--oversubscription 'PSW': expected LEVEL=VALUE"),
    ({"oversubscription": ["=2"]}, "--oversubscription '=2': expected LEVEL=VALUE"),
    ({"oversubscription": ["CORE=2"]}, "--oversubscription CORE=2: unknown level 'CORE'; the levels are ASW, PSW, DSW"),
    ({"oversubscription": ["PSW=0.5"]}, "--oversubscription PSW=0.5: expected a ratio from 1 to 1,000,000"),
    ({"oversubscription": ["PSW=two"]}, "--oversubscription PSW=two: expected a ratio"),
    ({"oversubscription": ["PSW=nan"]}, "--oversubscription PSW=nan: expected a ratio"),
    ({"oversubscription": ["PSW=2", "PSW=3"]}, "--oversubscription: level 'PSW' given twice"),
    ({"uplink_gbps": ["ASW=-1"]}, "--uplink-gbps ASW=-1: expected Gbit/s from 0"),
    ({"uplink_gbps": ["ASW=inf"]}, "--uplink-gbps ASW=inf: expected Gbit/s"),
    ({"uplink_gbps": ["ASW=100"], "oversubscription": ["ASW=2"]}, "level 'ASW': give --oversubscription or --uplink-gbps, not both"),
    ({"nvlink": "PSW"}, "--nvlink PSW: only the lowest level can be one; the levels, lowest first, are ASW, PSW, DSW"),
    ({"nvlink": "X"}, "--nvlink X: unknown level"),
    ({"name": "a/b"}, "--name: cluster name 'a/b' must be"),
    ({"node_type_options": ["colour=red"]}, "--node-type 'colour=red': expected FIELD=VALUE with FIELD one of name, gpus"),
    ({"node_type_options": ["gpus=eight"]}, "--node-type 'gpus=eight': expected an integer, got 'eight'"),
    ({"node_type_options": ["nic_gbps=fast"]}, "--node-type 'nic_gbps=fast': expected a number"),
    ({"node_type_options": ["nic_gbps=0"]}, "--node-type: nic_gbps: Input should be greater than or equal to 0.001"),
    ({"node_type_options": ["fabric=optical"]}, "--node-type: fabric: Input should be 'pcie' or 'nvlink'"),
    ({"node_type_options": ["gpus=4", "gpus=8"]}, "--node-type: gpus given twice"),
    ({"node_type_options": ["gpus=4"], "gpus_per_node": 8}, "--gpus-per-node 8 and --node-type gpus=4: give one"),
])
def test_flag_errors_are_one_line_naming_the_flag(kwargs, message):
    kwargs = {"name": "lj", **kwargs}
    with pytest.raises(DeepShareError) as info:
        import_cluster(TABLE, "topo.csv", **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_node_type_options():
    name, hardware = node_type(["name=h800", "gpu_model=H800", "nic_gbps=1600", "nvlink_gbps=3200"], gpus_per_node=4)
    assert name == "h800"
    # the default type's 8 switches, one per GPU at most: 4 on a 4-GPU node
    assert hardware == {"gpus": 4, "gpu_model": "H800", "fabric": "nvlink", "pcie_switches": 4, "intra_node_gbps": 512.0,
                        "nvlink_gbps": 3200.0, "nic_gbps": 1600.0}
    with pytest.raises(DeepShareError, match=r"^--node-type: pcie_switches: at most gpus \(4\).*got 8$"):
        node_type(["pcie_switches=8"], gpus_per_node=4)
    with pytest.raises(DeepShareError, match=r"^--node-type: gpus: Input should be greater than 0$"):
        node_type(["gpus=0"])  # not also an error about the switches the user never gave
    imported = import_cluster(TABLE, "topo.csv", name="lj", node_type_options=["name=h800", "gpu_model=H800"],
                              gpus_per_node=4)
    assert {(n.node_type, n.gpu_model, n.gpus) for n in imported.topology.nodes} == {("h800", "H800", 4)}
    assert imported.topology.total_gpus == 16


def test_groups_of_one_prefix_count_on_and_do_not_collide():
    topo = parse_topology("node_types: {t: {gpus: 4}}\nnodes:\n  - {type: t, count: 2}\n  - {type: t, count: 2, prefix: node}\n"
                          "  - {type: t, count: 1, prefix: node1}\n")  # node10: no group reaches it
    assert [n.name for n in topo.nodes] == ["node0", "node1", "node2", "node3", "node10"]


def test_a_node_group_can_give_exact_names():
    topo = parse_topology("node_types: {t: {gpus: 4}}\nnodes:\n"
                          "  - {type: t, names: [10.0.0.1, \"yes\"], rack: r0}\n  - {type: t, count: 2}\n")
    assert [n.name for n in topo.nodes] == ["10.0.0.1", "yes", "node0", "node1"]  # count defaults to the names'


@pytest.mark.parametrize("groups,message", [
    ("- {type: t, names: [a, b], count: 3}", "nodes.0: Value error, names: expected count (3) names, got 2"),
    ("- {type: t, names: [a], prefix: x}", "names: give prefix or names, not both"),
    ("- {type: t, names: [node1]}\n  - {type: t, count: 2}",
     "nodes[0].names[0]: 'node1' is already the name of a node of nodes[1] (or shows as one); node names must be unique"),
    ("- {type: t, names: [a, a]}", "nodes[0].names[1]: 'a' is already the name of a node of nodes[0]"),
    ("- {type: t, names: [a]}\n  - {type: t, names: [a]}", "nodes[1].names[0]: 'a' is already the name of a node of nodes[0]"),
    ("- {type: t, names: []}", "nodes.0.names"),
    ("- {type: t, names: [a/b]}", "nodes.0.names.0"),
    ("- {type: t, count: 11}\n  - {type: t, count: 1, prefix: node1}",  # node10 twice
     "nodes[1]: prefix 'node1' names a node 'node10', already the name of a node of nodes[0] (or one that shows "
     "alike); node names must be unique"),
])
def test_exact_names_are_checked(groups, message):
    with pytest.raises(DeepShareError) as info:
        parse_topology("node_types: {t: {gpus: 4}}\nnodes:\n  " + groups, source="s.yaml")
    assert message in str(info.value) and str(info.value).startswith("s.yaml: ")


@pytest.mark.parametrize("gpus", ["٨", "1_0", " 8", "8.0", "+8"])
def test_a_gpu_capacity_written_other_than_in_ascii_digits_is_refused(gpus):
    """int() reads Arabic-Indic digits and underscores: "٨" was taken as 8 GPUs."""
    text = nodes_json(k8s_node("gpu-a", {"nvidia.com/gpu.clique": "c", "topology.kubernetes.io/rack": "r"}, gpus))
    with pytest.raises(DeepShareError, match=r"status.capacity\['nvidia.com/gpu'\]: expected a GPU count from 1"):
        parse_kubectl_nodes(text, "n.json", LEVELS)


@pytest.mark.parametrize("breaker", ["\x85", "\u2028", "\u2029", "\x9b", "\ufffe"])
def test_a_line_break_yaml_knows_cannot_end_the_generated_comment(breaker):
    """PyYAML breaks lines at NEL and the Unicode line and paragraph separators too: a level name
    holding one ended the `# Imported ...` comment, and the rest was read as spec keys. A level
    name may no longer hold one (names refuse them); a file's name still may."""
    table = "ip,Leaf\n10.0.0.1,l0\n10.0.0.2,l0\n"
    imported = import_cluster(table, f"topo{breaker}name: x\nv2.csv", name="c")
    assert len(imported.topology.nodes) == 2 and [level.name for level in imported.topology.levels] == ["Leaf"]
    if breaker != "\ufffe":
        with pytest.raises(DeepShareError, match="must be 1-256 characters without '/' or control characters"):
            import_cluster(f"ip,Leaf{breaker}name: x\n10.0.0.1,l0\n", "t.csv", name="c")


def test_a_file_name_that_is_not_utf8_imports():
    """A name that is not UTF-8 arrives with surrogates (surrogateescape), which could not be
    written into the spec's comment: a UnicodeEncodeError traceback."""
    imported = import_cluster("ip,Leaf\n10.0.0.1,l0\n", "topo\udcff.csv", name="c")
    assert len(imported.topology.nodes) == 1
