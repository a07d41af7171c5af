"""Contention models against the shipped pairwise table, what-if predictions, monotonicity."""

from __future__ import annotations

import csv
import io
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import CONTENTION_MODELS, make_contention, ProfiledContention
from deepshare.core.contention.base import RunningJob
from deepshare.core.topology import uniform
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement
from deepshare.core.workloads import ProfileKey, default_catalog

CAT = default_catalog()
TOPO = uniform(8, 8)


def job(job_id: str, model: str, gpus: int, *nodes: int) -> RunningJob:
    """``gpus`` GPUs split as evenly as possible over ``nodes``."""
    base, extra = divmod(gpus, len(nodes))
    counts = {n: base + (1 if i < extra else 0) for i, n in enumerate(nodes)}
    return RunningJob(job_id, model, gpus, Placement.of(counts))


def r(victim: str, aggressor: str) -> float:
    return CAT.ratio(ProfileKey.parse(victim), ProfileKey.parse(aggressor))


def state(**options):
    return make_contention("profiled", **options).new_state(TOPO, CAT)


# X: MoE 4 GPUs on nodes 0,1; Y: FSDP 4 on 0,2; Z: DLRM 2 on 1,3; W: Transformer-XL 2 on 4,5 (alone)
X = job("x", "MoE", 4, 0, 1)
Y = job("y", "FSDP", 4, 0, 2)
Z = job("z", "DLRM", 2, 1, 3)
W = job("w", "Transformer-XL", 2, 4, 5)
S = job("s", "MobileNetV3", 2, 0)  # single node, on X's and Y's node 0


def test_min_over_colocated_multi_node_jobs():
    st_ = state()
    for j in (X, Y, Z, W):
        st_.add(j)
    assert st_.ratio("x") == max(0.35, min(r("MoE,4,2", "FSDP,4,2"), r("MoE,4,2", "DLRM,2,2")))
    assert st_.ratio("x") == r("MoE,4,2", "FSDP,4,2")  # the smaller of the two cells
    assert st_.ratio("y") == max(0.35, r("FSDP,4,2", "MoE,4,2"))  # node 2 is Y's alone
    assert st_.ratio("z") == max(0.35, r("DLRM,2,2", "MoE,4,2"))
    assert st_.ratio("w") == 1.0


def test_table_cells_used_are_the_shipped_ones():
    # spot-check the cells used above against the CSV text itself
    text = (resources.files("deepshare.data") / "profiles" / "shared_thp_ratio.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    table = {row[0]: dict(zip(header[1:], map(float, row[1:]))) for row in rows[1:]}
    assert table["MoE,4,2"]["FSDP,4,2"] == r("MoE,4,2", "FSDP,4,2")
    assert table["DLRM,2,2"]["MoE,4,2"] == r("DLRM,2,2", "MoE,4,2")


def test_single_node_jobs_are_contention_free_and_harmless():
    st_ = state()
    st_.add(X)
    st_.add(Y)
    before = st_.ratio("x"), st_.ratio("y")
    assert st_.add(S) == {"s"}
    assert st_.ratio("s") == 1.0
    assert (st_.ratio("x"), st_.ratio("y")) == before
    assert st_.predict(job("s2", "FSDP", 4, 0)).ratio == 1.0
    assert st_.remove("s") == set()
    assert (st_.ratio("x"), st_.ratio("y")) == before


def contending_floor_pair() -> tuple[ProfileKey, ProfileKey, float]:
    """A measured table pair below the 0.35 floor whose jobs fit an 8-node cluster."""
    low = sorted(
        ((ratio, str(v), str(a)) for (v, a), ratio in CAT.ratios.items() if ratio < 0.35 and v != a),
    )
    assert low, "the shipped table has cells below 0.35"
    ratio, v, a = low[0]
    return ProfileKey.parse(v), ProfileKey.parse(a), ratio


def test_floor_applies_to_cells_below_it():
    v, a, cell = contending_floor_pair()
    assert cell < 0.35
    victim = job("v", v.model, v.gpus, *range(v.nodes))
    aggressor = job("a", a.model, a.gpus, *range(a.nodes))
    assert CAT.profile_key(victim.model, victim.gpus, victim.placement.num_nodes) == v
    assert CAT.profile_key(aggressor.model, aggressor.gpus, aggressor.placement.num_nodes) == a
    st_ = state()
    st_.add(aggressor)
    assert st_.predict(victim).ratio == 0.35
    st_.add(victim)
    assert st_.ratio("v") == 0.35
    # a lower floor lets the cell through
    low = state(floor=0.1)
    low.add(aggressor)
    low.add(victim)
    assert low.ratio("v") == cell


def test_floor_also_applies_to_the_existing_job():
    # MoE,4,4 next to FSDP,8,8 is 0.333 < 0.35: the running victim is floored when the
    # aggressor arrives, and the prediction says so too.
    assert r("MoE,4,4", "FSDP,8,8") < 0.35
    victim = job("v", "MoE", 4, 0, 1, 2, 3)
    aggressor = job("a", "FSDP", 8, *range(8))
    st_ = state()
    st_.add(victim)
    pred = st_.predict(aggressor)
    assert pred.others == {"v": 0.35}
    assert pred.others_loss == pytest.approx(0.65)
    st_.add(aggressor)
    assert st_.ratio("v") == 0.35


def test_product_aggregate():
    st_ = state(aggregate="product")
    for j in (X, Y, Z, W):
        st_.add(j)
    expected = r("MoE,4,2", "FSDP,4,2") * r("MoE,4,2", "DLRM,2,2")
    assert expected > 0.35
    assert st_.ratio("x") == pytest.approx(expected, rel=1e-12)
    assert st_.ratio("x") < min(r("MoE,4,2", "FSDP,4,2"), r("MoE,4,2", "DLRM,2,2"))
    assert st_.ratio("y") == r("FSDP,4,2", "MoE,4,2")


def test_product_is_floored():
    st_ = state(aggregate="product")
    # three heavy co-runners on the same two nodes drive the product below the floor
    st_.add(job("a", "MoE", 2, 0, 1))
    for i in range(3):
        st_.add(job(f"f{i}", "FSDP", 8, 0, 1))
    assert r("MoE,2,2", "FSDP,8,2") ** 3 < 0.35
    assert st_.ratio("a") == 0.35


def test_single_node_jobs_contend_when_asked():
    st_ = state(single_node_contention_free=False)
    st_.add(X)
    st_.add(Y)
    changed = st_.add(S)  # MobileNetV3 2 GPUs on node 0, looked up as its 2-node profile
    assert "s" in changed
    assert st_.ratio("s") == max(0.35, min(r("MobileNetV3,2,2", "MoE,4,2"), r("MobileNetV3,2,2", "FSDP,4,2")))
    assert st_.ratio("x") == max(0.35, min(r("MoE,4,2", "FSDP,4,2"), r("MoE,4,2", "MobileNetV3,2,2")))
    # a 1-GPU single-node job uses the nearest measured key, 2 GPUs on 2 nodes
    one = job("one", "GraphSage", 1, 2)
    st_.add(one)
    assert st_.ratio("one") == max(0.35, r("GraphSage,2,2", "FSDP,4,2"))
    # and two single-node jobs on different nodes do not see each other
    far = job("far", "FSDP", 2, 7)
    st_.add(far)
    assert st_.ratio("far") == 1.0


def test_none_model_is_all_ones():
    st_ = make_contention("none").new_state(TOPO, CAT)
    added = []
    for j in (X, Y, Z, W):
        st_.add(j)
        added.append(j.job_id)
        assert all(st_.ratio(i) == 1.0 for i in added)
    assert st_.predict(job("c", "FSDP", 8, 0, 1)).cost == 0.0
    assert make_contention("none").name == "none"
    assert make_contention("profiled").name == "profiled"


@pytest.mark.parametrize(
    "name,options",
    [
        ("profiled", {"floor": 0.0}),
        ("profiled", {"floor": -0.2}),
        ("profiled", {"floor": 1.5}),
        ("profiled", {"floor": float("nan")}),
        ("profiled", {"aggregate": "mean"}),
        ("profiled", {"bogus": 1}),
        ("none", {"floor": 0.5}),
        ("quadratic", {}),
    ],
)
def test_invalid_options_raise(name, options):
    with pytest.raises(DeepShareError) as info:
        make_contention(name, **options)
    if name == "quadratic":
        for known in CONTENTION_MODELS:
            assert known in str(info.value)


def test_direct_construction_validates():
    with pytest.raises(DeepShareError):
        ProfiledContention(floor=0)
    with pytest.raises(DeepShareError):
        ProfiledContention(aggregate="max")  # type: ignore[arg-type]


# -- dynamics ----------------------------------------------------------------------------------
def test_ratios_go_back_up_when_aggressor_leaves():
    st_ = state()
    st_.add(X)
    assert st_.ratio("x") == 1.0
    assert st_.add(Y) == {"x", "y"}
    assert st_.ratio("x") == r("MoE,4,2", "FSDP,4,2") < 1.0
    st_.add(Z)
    assert st_.remove("y") == {"x"}
    assert st_.ratio("x") == max(0.35, r("MoE,4,2", "DLRM,2,2"))
    assert st_.remove("z") == {"x"}
    assert st_.ratio("x") == 1.0
    with pytest.raises(DeepShareError):
        st_.add(X)  # already tracked


def test_predict_equals_add_and_does_not_mutate():
    st_ = state()
    for j in (X, Z, W):
        st_.add(j)
    before = {i: st_.ratio(i) for i in ("x", "z", "w")}
    pred = st_.predict(Y)
    assert {i: st_.ratio(i) for i in ("x", "z", "w")} == before
    assert st_.predict(Y) == pred  # asking twice gives the same answer
    changed = st_.add(Y)
    assert st_.ratio("y") == pred.ratio
    assert changed - {"y"} == set(pred.others)
    for other, ratio in pred.others.items():
        assert st_.ratio(other) == ratio
    assert pred.others_loss == pytest.approx(sum(before[i] - pred.others[i] for i in pred.others))
    assert pred.cost == pytest.approx(1 - pred.ratio + pred.others_loss)


# -- properties --------------------------------------------------------------------------------
MODELS = CAT.models


@st.composite
def running_jobs(draw, prefix: str = "j", max_jobs: int = 7):
    count = draw(st.integers(1, max_jobs))
    jobs = []
    for i in range(count):
        nodes = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True))
        counts = {n: draw(st.integers(1, 4)) for n in nodes}
        placement = Placement.of(counts)
        jobs.append(RunningJob(f"{prefix}{i}", draw(st.sampled_from(MODELS)), placement.total_gpus, placement))
    return jobs


OPTIONS = st.fixed_dictionaries(
    {
        "aggregate": st.sampled_from(["min", "product"]),
        "single_node_contention_free": st.booleans(),
        "floor": st.sampled_from([0.35, 0.1, 1e-6]),
    }
)


@settings(max_examples=150, deadline=None)
@given(running_jobs(), OPTIONS, st.data())
def test_adding_never_raises_a_ratio_and_ratios_stay_in_range(jobs, options, data):
    st_ = state(**options)
    for j in jobs:
        before = {i: st_.ratio(i) for i in st_._ratio}
        pred = st_.predict(j)
        assert {i: st_.ratio(i) for i in before} == before  # predict mutates nothing
        changed = st_.add(j)
        after = {i: st_.ratio(i) for i in before}
        for i in before:
            assert after[i] <= before[i]
            assert (after[i] != before[i]) == (i in changed)
        for i in list(after) + [j.job_id]:
            assert 0.0 < st_.ratio(i) <= 1.0
        # predict() said what add() did
        assert st_.ratio(j.job_id) == pytest.approx(pred.ratio, rel=1e-12)
        assert set(pred.others) == {i for i in before if after[i] != before[i]} or options["aggregate"] == "product"
        for i, ratio in pred.others.items():
            assert after[i] == pytest.approx(ratio, rel=1e-12)
        assert pred.others_loss == pytest.approx(sum(before[i] - after[i] for i in before), abs=1e-12)
    # removing jobs (any order) never lowers a remaining ratio and ends at all ones
    order = data.draw(st.permutations([j.job_id for j in jobs]))
    for k, job_id in enumerate(order):
        before = {i: st_.ratio(i) for i in st_._ratio if i != job_id}
        st_.remove(job_id)
        for i in before:
            assert st_.ratio(i) >= before[i]
            assert 0.0 < st_.ratio(i) <= 1.0
    assert st_._ratio == {}
