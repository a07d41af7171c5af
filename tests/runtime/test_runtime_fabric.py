"""Fabric levels read from Ray node labels, and gangs kept inside one domain by Ray.

Without Ray: :func:`read_cluster` with a level mapping (exact domains, levels, racks), the
``--level`` / ``--nvlink`` / ``--uplink-gbps`` / ``--oversubscription`` / ``--local-label`` flags
(parsed as ``clusters import`` parses them), the placement group arguments the launcher builds
for a job with a ``required_level`` (``topology_strategy`` on a Ray that takes it, else the
domain in every bundle's label selector), and the control loop keeping such a gang in one domain
with the in-memory launcher.

With Ray (slow): a fake multi-node cluster (``ray.cluster_utils.Cluster``) whose nodes carry
labels for two leaf domains; a real :class:`RayLauncher` and control loop launch a gang that
requires ``leaf``, and Ray's placement group lands inside one labelled domain, with
``topology_strategy`` and with the label-selector fallback.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from cli_run import cli, one_error_line
from fake_launcher import FakeLauncher

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import Level
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.runtime import launcher as launcher_module
from deepshare.runtime.cluster import NAME_LABEL, NO_LEVELS, ClusterState, LabelLevels, label_levels, read_cluster
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.launcher import LaunchError, placement_group_args, required_domain
from deepshare.runtime.runnames import RunNames
from deepshare.runtime.localcluster import LocalCluster, local_labels
from deepshare.runtime.loop import ControlLoop, LoopConfig
from deepshare.runtime.spec import spec_from_json

ROOT = Path(__file__).resolve().parents[2]
LEAF, SPINE, CLIQUE = "example.com/leaf", "example.com/spine", "nvidia.com/gpu.clique"
LEVELS = LabelLevels((Level("leaf", oversubscription=2.0), Level("spine", uplink_gbps=800.0)), (LEAF, SPINE))


def ray_node(name: str, gpus: float, labels: dict[str, str], alive: bool = True) -> dict:
    return {"NodeID": f"{name}-id".ljust(56, "0"), "Alive": alive, "Resources": {"GPU": gpus, "CPU": 1.0},
            "NodeManagerAddress": "10.0.0.1", "NodeName": name, "Labels": {NAME_LABEL: name, **labels}}


NODES = [
    ray_node("n3", 4, {LEAF: "l1", SPINE: "s0"}),
    ray_node("n0", 4, {LEAF: "l0", SPINE: "s0", "deepshare.io/nic-gbps": "100"}),
    ray_node("n1", 4, {LEAF: "l0", SPINE: "s0", "deepshare.io/nic-gbps": "100"}),
    ray_node("n2", 4, {LEAF: "l1", SPINE: "s0"}),
    ray_node("n4", 4, {SPINE: "s0"}),  # no leaf label: a leaf domain of its own
    ray_node("n5", 4, {LEAF: "l0", SPINE: "s1"}),  # leaf l0 under another spine: another switch
    {"NodeID": "head".ljust(56, "0"), "Alive": True, "Resources": {"CPU": 8.0}, "NodeName": "head", "Labels": {}},
    ray_node("gone", 4, {LEAF: "l0", SPINE: "s0"}, alive=False),
]


def live_spec(name: str, gpus: int, **extra: object):
    return spec_from_json(dict(name=name, gpus=gpus, model="DLRM", command=[sys.executable, "-c", "pass"],
                               checkpoint_dir="/tmp/ckpt", **extra))


# -- read_cluster ----------------------------------------------------------------------------
def test_read_cluster_reads_each_levels_domain_from_its_label():
    state = read_cluster(NODES, "labelled", LEVELS)
    assert [n.name for n in state.nodes] == ["n0", "n1", "n2", "n3", "n4", "n5"]
    topology = state.topology
    assert topology.levels == LEVELS.levels and state.levels == LEVELS
    assert [n.domains for n in topology.nodes] == [
        ("l0", "s0"), ("l0", "s0"), ("l1", "s0"), ("l1", "s0"), ("unlabelled:n4", "s0"), ("l0", "s1")]
    assert [n.domain_labels for n in state.nodes] == [
        ("l0", "s0"), ("l0", "s0"), ("l1", "s0"), ("l1", "s0"), (None, "s0"), ("l0", "s1")]
    assert [n.rack for n in topology.nodes] == ["s0/l0", "s0/l0", "s0/l1", "s0/l1", "s0/unlabelled:n4", "s1/l0"]
    fabric = topology.fabric
    assert [level.name for level in fabric.levels] == ["leaf", "spine"]
    leaves = {fabric.domains[d].name: fabric.domains[d].nodes for d in fabric.by_level[0]}
    assert leaves == {"s0/l0": (0, 1), "s0/l1": (2, 3), "s0/unlabelled:n4": (4,), "s1/l0": (5,)}
    spines = {fabric.domains[d].name: fabric.domains[d].nodes for d in fabric.by_level[1]}
    assert spines == {"s0": (0, 1, 2, 3, 4), "s1": (5,)}
    # leaf: the nodes' NIC bandwidth over 2; spine: the given uplink
    assert {fabric.domains[d].name: fabric.domains[d].uplink_gbps for d in fabric.by_level[0]}["s0/l0"] == 100.0
    assert {fabric.domains[d].uplink_gbps for d in fabric.by_level[1]} == {800.0}
    assert state.unlabelled() == [("leaf", LEAF, ["n4"])]


def test_an_nvlink_level_a_rack_label_and_no_levels():
    levels = label_levels([f"nvlink_domain={CLIQUE}", f"leaf={LEAF}"], nvlink="nvlink_domain")
    assert levels.levels[0] == Level("nvlink_domain", nvlink=True) and levels.labels == (CLIQUE, LEAF)
    nodes = [ray_node("a", 4, {CLIQUE: "nvl0", LEAF: "l0"}), ray_node("b", 4, {CLIQUE: "nvl0", LEAF: "l0"}),
             ray_node("c", 4, {LEAF: "l0", "deepshare.io/rack": "row3"})]
    state = read_cluster(nodes, levels=levels)
    assert [n.domains for n in state.topology.nodes] == [("nvl0", "l0"), ("nvl0", "l0"), ("unlabelled:c", "l0")]
    # the rack is the path above the NVLink level, unless deepshare.io/rack says otherwise
    assert [n.rack for n in state.topology.nodes] == ["l0", "l0", "row3"]
    assert state.topology.fabric.nvlink_level == 0
    plain = read_cluster(nodes)  # no levels: the one rack level, as before
    assert plain.levels == NO_LEVELS and plain.topology.levels == ()
    assert [level.name for level in plain.topology.fabric.levels] == ["rack"]
    assert [n.rack for n in plain.topology.nodes] == ["rack0", "rack0", "row3"]
    assert all(n.domain_labels == () for n in plain.nodes)


def test_level_flags_are_parsed_as_clusters_import_parses_them():
    levels = label_levels([f"leaf={LEAF}", f"spine={SPINE}"], uplink_gbps=["spine=800"], oversubscription=["leaf=2"])
    assert levels == LEVELS
    assert levels.label("spine") == SPINE and levels.label("core") is None
    assert levels.describe() == f"leaf={LEAF} < spine={SPINE}"
    assert label_levels() is NO_LEVELS
    bad = [
        (dict(levels=["leaf"]), "--level 'leaf': expected LEVEL=VALUE"),
        (dict(levels=[f"leaf={LEAF}", f"leaf={SPINE}"]), "level 'leaf' given twice"),
        (dict(levels=["leaf=ray.io/node-id"]), "every node has its own ray.io/node-id"),
        (dict(levels=[f"leaf={LEAF}"], nvlink="spine"), "--nvlink spine: unknown level"),
        (dict(levels=[f"leaf={LEAF}", f"spine={SPINE}"], nvlink="spine"), "only the lowest level can be one"),
        (dict(levels=[f"leaf={LEAF}"], uplink_gbps=["spine=1"]), "unknown level 'spine'"),
        (dict(levels=[f"leaf={LEAF}"], uplink_gbps=["leaf=1"], oversubscription=["leaf=2"]), "not both"),
        (dict(levels=[f"leaf={LEAF}"], oversubscription=["leaf=0.5"]), "a ratio from 1"),
        (dict(nvlink="leaf"), "--nvlink needs the levels"),
        (dict(uplink_gbps=["leaf=1"]), "--uplink-gbps needs the levels"),
    ]
    for kwargs, message in bad:
        levels_arg = kwargs.pop("levels", ())
        with pytest.raises(DeepShareError) as info:
            label_levels(levels_arg, **kwargs)
        assert message in str(info.value), (kwargs, str(info.value))


def test_local_labels_one_value_per_node():
    assert local_labels([f"{LEAF}=l0, l0,l1,", "rack=a,b,c,d"], 4) == {LEAF: ("l0", "l0", "l1", ""), "rack": tuple("abcd")}
    for values, message in (([f"{LEAF}=l0"], "1 value(s) for 2 node(s)"), ([f"{NAME_LABEL}=a,b"], "--local sets"),
                            (["ray.io/x=a,b"], "Ray sets"), (["Bad.Prefix/x=a,b"], "is not a label key"),
                            ([f"{LEAF}=a,-b"], "is not a label value"), ([f"{LEAF}=a,b", f"{LEAF}=c,d"], "twice")):
        with pytest.raises(DeepShareError) as info:
            local_labels(values, 2)
        assert message in str(info.value), (values, str(info.value))
    with pytest.raises(DeepShareError, match="3 value"):
        LocalCluster(2, 1, labels={LEAF: ("a", "b", "c")})


def test_the_flags_fail_before_ray_in_one_line(capsys):
    for argv, needle in ((["--nvlink", "leaf"], "--nvlink needs the levels"),
                         (["--local-label", f"{LEAF}=a,b"], "--local-label needs --local"),
                         (["--local", "--nodes", "2", "--local-label", f"{LEAF}=a"], "1 value(s) for 2 node(s)"),
                         (["--level", f"leaf={LEAF}", "--oversubscription", "spine=2"], "unknown level 'spine'")):
        rc, _, err = cli(capsys, "scheduler", "start", "--policy", "fifo", "--port", "0", *argv)
        assert rc == 2, err
        one_error_line(err, needle)


# -- the placement group's arguments ---------------------------------------------------------
NAMES = RunNames("0123abcd4567")
def test_a_required_level_becomes_topology_strategy_or_the_domains_label():
    state = read_cluster(NODES, levels=LEVELS)
    ids = {n.name: n.node_id for n in state.nodes}
    gang = live_spec("gang", 6, required_level="leaf")
    alloc = (("n2", 4), ("n3", 2))
    args = placement_group_args("gang-1", 2, gang, alloc, state, topology_strategy=True, names=NAMES)
    assert args == dict(bundles=[{"GPU": 4.0}, {"GPU": 2.0}], name="ds-0123abcd4567-gang-1-a2", lifetime="detached",
                        bundle_label_selector=[{"ray.io/node-id": ids["n2"]}, {"ray.io/node-id": ids["n3"]}],
                        topology_strategy={LEAF: "STRICT_PACK", "ray.io/node-id": "PACK"})
    assert "strategy" not in args  # Ray refuses both
    older = placement_group_args("gang-1", 2, gang, alloc, state, topology_strategy=False, names=NAMES)
    assert older == dict(bundles=[{"GPU": 4.0}, {"GPU": 2.0}], name="ds-0123abcd4567-gang-1-a2", lifetime="detached",
                         bundle_label_selector=[{"ray.io/node-id": ids["n2"], LEAF: "l1"},
                                                {"ray.io/node-id": ids["n3"], LEAF: "l1"}],
                         strategy="PACK")
    # the spine level: its label
    spine = live_spec("s", 8, required_level="spine")
    assert placement_group_args("s", 1, spine, (("n0", 4), ("n2", 4)), state, True, names=NAMES)["topology_strategy"] == {
        SPINE: "STRICT_PACK", "ray.io/node-id": "PACK"}
    assert required_domain(spine, (("n0", 4), ("n2", 4)), state) == (SPINE, "s0")


def test_no_constraint_without_a_required_level_a_label_or_on_an_unlabelled_node():
    state = read_cluster(NODES, levels=LEVELS)
    plain = dict(strategy="PACK")
    for spec, alloc, cluster in (
            (live_spec("a", 4), (("n0", 4),), state),  # asks nothing
            (live_spec("b", 4, preferred_level="leaf"), (("n0", 2), ("n2", 2)), state),  # a preference only
            (live_spec("c", 4, slice_size=2, slice_level="leaf"), (("n0", 2), ("n2", 2)), state),
            (live_spec("d", 4, required_level="leaf"), (("n4", 4),), state),  # its own domain: one node
            (live_spec("e", 4, required_level="leaf"), (("n0", 4),), read_cluster(NODES)),  # no levels mapped
    ):
        args = placement_group_args("x", 1, spec, alloc, cluster, topology_strategy=True, names=NAMES)
        assert args["strategy"] == plain["strategy"] and "topology_strategy" not in args, spec.name
        assert all(set(s) == {"ray.io/node-id"} for s in args["bundle_label_selector"]), spec.name
    with pytest.raises(LaunchError, match="spans leaf domains l0, l1") as info:
        placement_group_args("x", 1, live_spec("f", 8, required_level="leaf"), (("n0", 4), ("n2", 4)), state, True, names=NAMES)
    assert info.value.counts


def test_the_installed_ray_takes_topology_strategy():
    ray = pytest.importorskip("ray")
    major, minor = (int(p) for p in ray.__version__.split(".")[:2])
    if (major, minor) < (2, 60):
        pytest.skip(f"Ray {ray.__version__}: the launcher falls back to label selectors")
    assert launcher_module.supports_topology_strategy() is True


# -- the control loop, without Ray -------------------------------------------------------------
class LabelledFake(FakeLauncher):
    """The in-memory launcher whose nodes carry leaf labels."""

    def __init__(self, nodes: dict[str, int], leaves: dict[str, str]) -> None:
        super().__init__(nodes)
        self.leaves = leaves

    def cluster(self) -> ClusterState:
        with self._lock:
            ray_nodes = [ray_node(name, float(g), {LEAF: self.leaves[name]}) for name, g in self.nodes.items()]
        return read_cluster(ray_nodes, "fake", label_levels([f"leaf={LEAF}"]))


def test_the_loop_keeps_a_required_level_gang_in_one_leaf(tmp_path):
    fake = LabelledFake({"n0": 2, "n1": 2, "n2": 2, "n3": 2}, {"n0": "l0", "n1": "l0", "n2": "l1", "n3": "l1"})
    journal = Journal(tmp_path / "state")
    loop = ControlLoop(journal, make_policy("fifo+consolidated"), default_catalog(), make_contention("profiled"),
                       LoopConfig(interval_s=0.01), launcher=fake)
    small = journal.submit(live_spec("small", 1)).job_id
    loop.tick()
    gang = journal.submit(live_spec("gang", 4, required_level="leaf")).job_id
    loop.tick()
    assert journal.get(gang).state is JobState.RUNNING, journal.get(gang)
    placed = journal.get(gang).placement
    assert {fake.leaves[name] for name, _ in placed} != {fake.leaves[name] for name, _ in journal.get(small).placement}
    assert len({fake.leaves[name] for name, _ in placed}) == 1 and sum(g for _, g in placed) == 4


# -- on Ray ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def labelled_cluster():
    pytest.importorskip("ray")
    from raytools import ray_tmpdir, start_cluster, stop_cluster

    node = dict(num_cpus=1, num_gpus=2, object_store_memory=80 * 1024**2)
    leaves = ["l0", "l0", "l1", "l1"]
    with ray_tmpdir("ds-fab-"):
        c = start_cluster(dict(num_cpus=1, num_gpus=0, object_store_memory=80 * 1024**2),
                          [dict(node, labels={NAME_LABEL: f"node{i}", LEAF: leaf}) for i, leaf in enumerate(leaves)],
                          connect=dict(namespace="deepshare", log_to_driver=False))
        try:
            yield dict(zip((f"node{i}" for i in range(4)), leaves))
        finally:
            stop_cluster(c)


@pytest.mark.slow
def test_on_ray_a_required_leaf_gang_lands_inside_one_labelled_domain(labelled_cluster, tmp_path, monkeypatch):
    import ray
    from ray.util.placement_group import placement_group_table

    from deepshare.runtime.launcher import RayLauncher

    leaves = labelled_cluster
    journal = Journal(tmp_path / "state")
    ray_launcher = RayLauncher(journal.run_names, label_levels([f"leaf={LEAF}"]))
    names = {n["NodeID"]: n["Labels"][NAME_LABEL] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")}
    built: list[dict] = []
    real_args = launcher_module.placement_group_args

    def spy(*args, **kwargs):
        built.append(real_args(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(launcher_module, "placement_group_args", spy)
    loop = ControlLoop(journal, make_policy("fifo+consolidated"), default_catalog(), make_contention("profiled"),
                       LoopConfig(interval_s=0.2, preempt_grace_s=10.0), launcher=ray_launcher,
                       working_dir=str(ROOT))
    hold = "import time; from deepshare import job; job.report(samples=1, throughput=1.0, step=1); time.sleep(300)"

    def job(name: str, gpus: int, **extra: object):
        return spec_from_json(dict(name=name, gpus=gpus, model="DLRM", command=[sys.executable, "-c", hold],
                                   checkpoint_dir=str(tmp_path / "ckpt"), **extra))

    def running(job_id: str) -> None:
        deadline = time.monotonic() + 60
        while journal.get(job_id).state is not JobState.RUNNING:
            assert time.monotonic() < deadline, [(j.job_id, j.state.value, j.error) for j in journal.jobs()]
            report = loop.tick()
            assert report.error is None, report.error
            time.sleep(0.2)

    def bundle_leaves(job_id: str) -> set[str]:
        record = journal.get(job_id)
        table = placement_group_table(ray.util.get_placement_group(journal.run_names.pg(job_id, record.attempt)))
        assert table["state"] == "CREATED", table
        on = [names[node_id] for node_id in table["bundles_to_node_id"].values()]
        assert sorted(on) == sorted(name for name, _ in record.placement)  # the node-id pinning holds
        return {leaves[name] for name in on}

    try:
        small = journal.submit(job("small", 1)).job_id
        running(small)  # one GPU of one leaf taken: only the other leaf has 4 free GPUs
        # Ray itself holds the line: the same strategy over nodes of two leaves is never granted.
        (taken,) = (name for name, _ in journal.get(small).placement)
        across = [next(n for n in leaves if leaves[n] == leaf and n != taken) for leaf in ("l0", "l1")]
        ids = {name: node_id for node_id, name in names.items()}
        pg = ray.util.placement_group([{"GPU": 1.0}, {"GPU": 1.0}], bundle_label_selector=[
            {"ray.io/node-id": ids[n]} for n in across], topology_strategy={LEAF: "STRICT_PACK", "ray.io/node-id": "PACK"})
        try:
            assert not pg.wait(3)
        finally:
            ray.util.remove_placement_group(pg)
        gang = journal.submit(job("gang", 4, required_level="leaf")).job_id
        running(gang)
        assert built[-1]["topology_strategy"] == {LEAF: "STRICT_PACK", "ray.io/node-id": "PACK"}
        (gang_leaf,) = bundle_leaves(gang)
        assert gang_leaf not in bundle_leaves(small)
        # An older Ray (no topology_strategy): the domain's label in every bundle's selector. The
        # 3 GPUs left are in the small job's leaf.
        monkeypatch.setattr(launcher_module, "supports_topology_strategy", lambda: False)
        older = journal.submit(job("older", 2, required_level="leaf")).job_id
        running(older)
        assert "topology_strategy" not in built[-1]
        assert {s[LEAF] for s in built[-1]["bundle_label_selector"]} == bundle_leaves(older) == bundle_leaves(small)
    finally:
        for record in journal.jobs(JobState.RUNNING):
            ray_launcher.teardown(record.job_id, record.attempt, record.spec.gpus)
