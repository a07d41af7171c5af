"""A review of the cluster-spec and import inputs, each case failing before its fix: a long node
prefix times a large count asked for gigabytes of names; a large YAML document was parsed whole
(minutes, gigabytes) before its size was refused; an imported cluster of 40,000 hosts was refused
as "more than 100,000 values"; names that show alike (a zero-width space, NFC against NFD) were
two nodes; a ``;`` in a node name made a ``--jobs-csv`` placement read as two nodes; an error
quoted a 20 MB value whole."""

from __future__ import annotations

import tracemalloc

import pytest

from deepshare.core.documents import load_yaml
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric_import import import_cluster, parse_kubectl_nodes, parse_switch_table
from deepshare.core.names import name_identity
from deepshare.core.topology import SPEC_VALUES, parse_topology

TYPES = "node_types:\n  t: {gpus: 1}\nnodes:\n"


def test_a_long_prefix_is_refused_before_its_names_are_made():
    with pytest.raises(DeepShareError, match=r"^s\.yaml: nodes\.0\.prefix: String should have at most 256 characters"):
        parse_topology(TYPES + "  - {type: t, count: 100000, prefix: " + "x" * 100_000 + "}\n", "s.yaml")


def test_a_document_past_its_value_budget_is_refused_while_it_is_parsed():
    text = "a: [" + "0," * 40_000 + "0]\n"  # 40,002 values; the budget is 10,000
    tracemalloc.start()
    with pytest.raises(DeepShareError, match=r"^big\.yaml: expected a YAML document, got a document of more than "
                                             r"10,000 values$"):
        load_yaml(text, "big.yaml", max_values=10_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 15 * 2**20, peak  # the whole document's nodes take about 15 MB; a quarter is read


def test_a_larger_budget_takes_what_the_default_refuses_and_keys_are_not_values():
    text = "a: [" + "0," * 15_000 + "0]\n"
    with pytest.raises(DeepShareError, match="more than 10,000 values"):
        load_yaml(text, "s.yaml", max_values=10_000)
    assert len(load_yaml(text, "s.yaml", max_values=20_000)["a"]) == 15_001
    mapping = "".join(f"k{i}: {i}\n" for i in range(6_000))  # 6,001 values and 6,000 keys
    assert len(load_yaml(mapping, "m.yaml", max_values=7_000)) == 6_000


def test_an_imported_cluster_of_forty_thousand_hosts_loads():
    table = "ip,PSW,ASW\n" + "".join(f"10.0.{i // 256}.{i % 256},p{i // 400},a{i // 4}\n" for i in range(40_000))
    imported = import_cluster(table, "h.csv", name="h")  # it loads its own spec back: that was refused
    assert len(imported.topology.nodes) == 40_000 and SPEC_VALUES >= 10 * 40_000


@pytest.mark.parametrize("a, b", [("h1", "h\u200b1"), ("\u00e9", "e\u0301"), ("h1", "\ufeffh1"), ("ab", "a\u00adb"),
                                  ("\u00e9", "e\u200b\u0301")])
def test_names_that_show_alike_are_one_name(a, b):
    assert a != b and name_identity(a) == name_identity(b)
    with pytest.raises(DeepShareError, match=r"line 3: host .* is also on line 2 \(or one that shows alike\); "
                                             r"each host once"):
        parse_switch_table(f"ip,ASW\n{a},s\n{b},s\n", "t.csv")
    with pytest.raises(DeepShareError, match=r"nodes\[0\]\.names\[1\]: .* is already the name of a node of nodes\[0\] "
                                             r"\(or shows as one\)"):
        parse_topology(TYPES + f"  - {{type: t, names: ['{a}', '{b}']}}\n", "s.yaml")
    with pytest.raises(DeepShareError, match=r"also items\[0\] \(or a name that shows alike\); each node once"):
        parse_kubectl_nodes('{"items": [' + ", ".join(
            f'{{"metadata": {{"name": "{n}", "labels": {{"r": "x"}}}}}}' for n in (a, b)) + "]}", "n.json", [("r", "r")])


def test_different_names_stay_different():
    for a, b in [("h1", "h2"), ("\u00e9", "e"), ("Node", "node")]:
        assert name_identity(a) != name_identity(b)
    topology = parse_topology(TYPES + "  - {type: t, names: ['\u00e9', e, '\u06dd1', '1']}\n", "s.yaml")
    assert [node.name for node in topology.nodes] == ["\u00e9", "e", "\u06dd1", "1"]  # kept as written


@pytest.mark.parametrize("spec", ["  - {type: t, count: 2, prefix: 'a;'}\n", "  - {type: t, names: ['a;b', c]}\n"])
def test_a_semicolon_in_a_node_name_is_refused(spec):
    with pytest.raises(DeepShareError, match="no ';' in node names"):
        parse_topology(TYPES + spec, "s.yaml")


@pytest.mark.parametrize("raw", [
    {"node_types": {"t": {"gpus": 1}}, "nodes": [{"type": "t", "count": 2, "prefix": "a;"}]},
    {"node_types": {"t": {"gpus": 1}}, "nodes": [{"type": "t", "prefix": "x" * 257}]},
    {"node_types": {"t" * 257: {"gpus": 1}}, "nodes": [{"type": "t" * 257}]},
    {"node_types": {"t": {"gpus": 1}}, "nodes": [{"type": "t", "prefix": "h"}, {"type": "t", "prefix": "h\u200b"}]},
    {"node_types": {"t": {"gpus": 1}}, "nodes": [{"type": "t", "count": 11, "prefix": "node"},
                                                 {"type": "t", "prefix": "node1"}]},
])
def test_the_plain_preset_path_leaves_to_the_schema_what_it_refuses(raw):
    from deepshare.core.topology import plain_topology
    from deepshare.core.topology_spec import ClusterSpec

    assert plain_topology(raw) is None
    with pytest.raises(ValueError):
        ClusterSpec.model_validate(raw)


def test_a_huge_value_in_an_import_error_is_cut_short():
    doc = '{"items": [{"metadata": {"name": "' + "n" * 1_000_000 + '", "labels": {"r": "a"}}}]}'
    with pytest.raises(DeepShareError) as refused:
        parse_kubectl_nodes(doc, "n.json", [("r", "r")])
    assert len(str(refused.value)) < 500
