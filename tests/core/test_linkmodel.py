"""The link contention model: hand-computed sharing, invariants, calibration, simulation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.contention.base import RunningJob
from deepshare.core.contention.link import LinkCatalog, LinkContention, LinkParams, default_link_catalog, load_link_catalog
from deepshare.core.contention.link import physics
from deepshare.core.contention.link.params import shape_factor
from deepshare.core.contention.link.calibrate import Dataset, PairModel, calibrate, nearest_cell_prediction
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology, uniform
from deepshare.core.traces import generate, load, mix_preset
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Placement
from deepshare.core.workloads import Catalog, ProfileKey, default_catalog
from deepshare.policies import make_policy

TRACES = sorted((Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces").glob("*.json"))


def system(works, jobs_of_edges, links_of_edges, n_jobs, compute=1e-9, overlap=0.0, congestion=0.0, kappa=1.0):
    return physics.System(
        model=np.zeros(n_jobs, dtype=int),
        compute=np.full(n_jobs, compute),
        overlap=np.full(n_jobs, overlap),
        congestion=np.full(n_jobs, congestion),
        private=np.zeros(n_jobs),
        edge_job=np.array(jobs_of_edges),
        edge_link=np.array(links_of_edges),
        work=np.array(works, dtype=float),
        n_links=max(links_of_edges) + 1,
        kappa=np.array([[kappa]]),
    )


# -- hand-computed physics ---------------------------------------------------------------------
def test_two_always_communicating_jobs_on_one_link_get_half_each():
    s = system([1.0, 1.0], [0, 1], [0, 0], 2)
    assert physics.ratios(s) == pytest.approx([0.5, 0.5], abs=1e-9)


def test_a_job_alone_gets_its_isolated_rate():
    s = system([1.0], [0], [0], 1, compute=0.5, overlap=0.3)
    assert physics.ratios(s) == pytest.approx([1.0])
    # t = max(c, comm) + (1 - o) * min(c, comm) = 1 + 0.7 * 0.5
    assert physics.isolated_times(s) == pytest.approx([1.35])


def test_a_job_that_rarely_communicates_barely_slows_a_heavy_one():
    # job 0: all communication (w = 1, c ~ 0); job 1: w = 0.1, c = 0.9, no overlap.
    s = physics.System(
        model=np.zeros(2, dtype=int), compute=np.array([1e-9, 0.9]), overlap=np.zeros(2), congestion=np.zeros(2),
        private=np.zeros(2), edge_job=np.array([0, 1]), edge_link=np.array([0, 0]), work=np.array([1.0, 0.1]),
        n_links=1, kappa=np.array([[1.0]]),
    )
    r = physics.ratios(s)
    # Fixed point: s0 = 1 + d1, d1 = 0.1 s1 / (0.9 + 0.1 s1), s1 = 1 + d0 = 2 (d0 = 1).
    d1 = 0.2 / 1.1
    assert r[0] == pytest.approx(1.0 / (1.0 + d1), rel=1e-6)
    assert r[1] == pytest.approx(1.0 / 1.1, rel=1e-6)


def test_kappa_below_one_never_lets_sharers_exceed_capacity():
    s = system([1.0, 1.0], [0, 1], [0, 0], 2, kappa=0.3)
    assert physics.ratios(s) == pytest.approx([0.5, 0.5], abs=1e-9)


def test_congestion_costs_more_than_a_fair_share():
    s = system([1.0, 1.0], [0, 1], [0, 0], 2, congestion=0.5)
    r = physics.ratios(s)
    assert r == pytest.approx([1 / 2.5, 1 / 2.5], rel=1e-6)


def test_sensitivity_scales_the_loss_beyond_a_fair_share_and_never_below_it():
    s = system([1.0, 1.0], [0, 1], [0, 0], 2, congestion=0.5)
    sensitive = physics.System(**{**s.__dict__, "sensitivity": np.array([2.0, 1.0])})
    # job 0: coefficient 1.5 * 2 = 3 -> ratio 1/4; job 1 keeps 1.5 -> 1/2.5
    assert physics.ratios(sensitive) == pytest.approx([1 / 4, 1 / 2.5], rel=1e-6)
    calm = physics.System(**{**s.__dict__, "sensitivity": np.array([0.1, 0.1])})
    assert physics.ratios(calm) == pytest.approx([0.5, 0.5], abs=1e-9)  # the fair share is the floor


def test_shape_factor_by_hand():
    p = LinkParams(compute_s=1, nic_s=1, pcie_s=1, overlap=0.5, samples_per_gpu=1, nodes_exponent=0.5, gpus_per_node_exponent=-1.0)
    assert shape_factor(p, 2, 1) == 1.0
    assert shape_factor(p, 8, 4) == pytest.approx(2.0 / 4.0)
    with pytest.raises(DeepShareError, match="nodes_exponent"):
        LinkParams(compute_s=1, nic_s=1, pcie_s=1, overlap=0.5, samples_per_gpu=1, nodes_exponent=9.0)


# -- invariants on random systems ----------------------------------------------------------------
@st.composite
def random_systems(draw):
    n_jobs = draw(st.integers(1, 6))
    n_links = draw(st.integers(1, 4))
    edges = []
    for j in range(n_jobs):
        links = draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True))
        edges += [(j, l, draw(st.floats(0.01, 2.0))) for l in sorted(links)]
    compute = [draw(st.floats(0.01, 2.0)) for _ in range(n_jobs)]
    overlap = [draw(st.floats(0.0, 1.0)) for _ in range(n_jobs)]
    congestion = [draw(st.floats(0.0, 1.0)) for _ in range(n_jobs)]
    kappa = draw(st.floats(0.2, 2.0))
    sensitivity = [draw(st.floats(0.1, 3.0)) for _ in range(n_jobs)]
    return physics.System(
        model=np.zeros(n_jobs, dtype=int), compute=np.array(compute), overlap=np.array(overlap),
        congestion=np.array(congestion), private=np.zeros(n_jobs),
        edge_job=np.array([e[0] for e in edges]), edge_link=np.array([e[1] for e in edges]),
        work=np.array([e[2] for e in edges]), n_links=n_links, kappa=np.array([[kappa]]),
        sensitivity=np.array(sensitivity),
    )


@settings(max_examples=150, deadline=None)
@given(random_systems())
def test_ratios_in_range_and_links_never_over_capacity(s):
    r = physics.ratios(s)
    assert np.all(r > 0) and np.all(r <= 1.0)
    t = physics.solve(s)
    use = np.bincount(s.edge_link, weights=s.work / t[s.edge_job], minlength=s.n_links)
    assert np.all(use <= 1.0 + 1e-6)


TINY = LinkCatalog(
    {
        "heavy": LinkParams(compute_s=0.1, nic_s=1.0, pcie_s=0.05, overlap=0.2, samples_per_gpu=8),
        "light": LinkParams(compute_s=1.0, nic_s=0.05, pcie_s=0.01, overlap=0.8, samples_per_gpu=32),
    },
    {},
)


def tiny_state(nodes=4, gpus=4):
    return LinkContention(TINY).new_state(uniform(nodes, gpus), default_catalog())


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["heavy", "light"]), st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True)),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["heavy", "light"]),
    st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
)
def test_adding_a_job_never_speeds_up_a_job_that_shares_links_only_with_it(running, model, nodes):
    """Monotone where max-min sharing is: see the next test for where it is not."""
    state = tiny_state()
    for i, (m, ns) in enumerate(running):
        state.add(RunningJob(f"j{i}", m, len(ns), Placement.of({n: 1 for n in ns})))
    before = {f"j{i}": state.ratio(f"j{i}") for i in range(len(running))}
    newcomer = RunningJob("new", model, len(nodes), Placement.of({n: 1 for n in nodes}))
    prediction = state.predict(newcomer)
    state.add(newcomer)
    assert state.ratio("new") == pytest.approx(prediction.ratio)
    for job_id, old in before.items():
        assert 0 < state.ratio(job_id) <= 1
        assert state.ratio(job_id) == pytest.approx(prediction.others.get(job_id, old))
        mine = set(running[int(job_id[1:])][1])
        shares_with_newcomer = bool(mine & set(nodes)) and len(nodes) > 1 and len(mine) > 1
        shares_with_others = any(
            k != int(job_id[1:]) and len(ns) > 1 and mine & set(ns) for k, (_, ns) in enumerate(running)
        )
        if shares_with_newcomer and not shares_with_others:
            assert state.ratio(job_id) <= old + 1e-9
    # removing it restores every ratio exactly
    state.remove("new")
    assert {j: state.ratio(j) for j in before} == pytest.approx(before)


def test_slowing_a_competitor_can_speed_a_job_up_as_max_min_sharing_does():
    # j1 shares node 2 with the newcomer and node 3 with j0; the newcomer slows j0 on nodes 0/1,
    # j0 then uses node 3 less often, and j1 gains more there than it loses on node 2.
    state = tiny_state()
    state.add(RunningJob("j0", "heavy", 3, Placement.of({0: 1, 1: 1, 3: 1})))
    state.add(RunningJob("j1", "heavy", 2, Placement.of({2: 1, 3: 1})))
    before = state.ratio("j1"), state.ratio("j0")
    state.add(RunningJob("new", "heavy", 3, Placement.of({0: 1, 1: 1, 2: 1})))
    assert state.ratio("j0") < before[1]
    assert state.ratio("j1") > before[0]
    assert state.ratio("j1") - before[0] < 0.01  # a second-order effect


def test_state_ratios_match_the_calibration_pair_model():
    catalog = default_catalog()
    data = Dataset.from_catalog(catalog)
    pair = PairModel(data)
    links = default_link_catalog()
    x = pair.pack(links)
    _, predicted = pair.predict(x)
    topo = load_topology("testbed")
    for cell in range(0, len(data.ratio), 37):
        v, a = data.keys[data.victim[cell]], data.keys[data.aggressor[cell]]
        state = LinkContention(links).new_state(topo, catalog)
        state.add(RunningJob("a", a.model, a.gpus, Placement.of({n: a.gpus // a.nodes for n in range(a.nodes)})))
        state.add(RunningJob("v", v.model, v.gpus, Placement.of({n: v.gpus // v.nodes for n in range(v.nodes)})))
        assert state.ratio("v") == pytest.approx(predicted[cell], abs=1e-9), (v, a)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["heavy", "light"]), st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(0, 7), max_size=6),
)
def test_incremental_ratios_equal_a_fresh_state_after_any_adds_and_removals(running, leaving):
    """Components merge on add and split on remove; the ratios must not remember the history."""
    jobs = [RunningJob(f"j{i}", m, len(ns), Placement.of({n: 1 for n in ns})) for i, (m, ns) in enumerate(running)]
    state = tiny_state(nodes=6)
    for job in jobs:
        state.add(job)
    gone = {f"j{i}" for i in leaving if i < len(jobs)}
    for job_id in sorted(gone):
        state.remove(job_id)
    fresh = tiny_state(nodes=6)
    for job in reversed(jobs):
        if job.job_id not in gone:
            fresh.add(job)
    for job in jobs:
        if job.job_id not in gone:
            assert state.ratio(job.job_id) == pytest.approx(fresh.ratio(job.job_id), abs=1e-12)


def test_removing_a_bridge_splits_the_component():
    state = tiny_state()
    state.add(RunningJob("a", "heavy", 2, Placement.of({0: 1, 1: 1})))
    state.add(RunningJob("b", "heavy", 2, Placement.of({2: 1, 3: 1})))
    state.add(RunningJob("bridge", "heavy", 2, Placement.of({1: 1, 2: 1})))
    assert state._comp_of["a"] == state._comp_of["b"]
    shared = state.ratio("a")
    state.remove("bridge")
    assert state._comp_of["a"] != state._comp_of["b"]
    assert state.ratio("a") > shared and state.ratio("a") == 1.0
    # a newcomer next to b re-solves b's component only
    assert state.add(RunningJob("c", "heavy", 2, Placement.of({2: 1, 3: 1}))) == {"b", "c"}


def test_placement_sensitivity_applies_to_its_placement_only(tmp_path):
    links = LinkCatalog(TINY.params, {}, "t", {"heavy": {"2,2": 2.0}})
    path = tmp_path / "p.json"
    path.write_text(links.to_json())
    loaded = LinkCatalog.from_json(path.read_text())
    assert loaded.placement_sensitivity("heavy", 2, 2) == 2.0
    assert loaded.placement_sensitivity("heavy", 4, 2) == 1.0 == loaded.placement_sensitivity("light", 2, 2)
    ratios = {}
    for name, catalog in (("plain", TINY), ("sensitive", loaded)):
        state = LinkContention(catalog).new_state(uniform(4, 4), default_catalog())
        state.add(RunningJob("x", "heavy", 2, Placement.of({0: 1, 1: 1})))
        state.add(RunningJob("y", "heavy", 4, Placement.of({0: 2, 1: 2})))
        ratios[name] = (state.ratio("x"), state.ratio("y"))
    assert ratios["sensitive"][0] < ratios["plain"][0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"models": {}, "sensitivity": {"heavy": {"2,2": -1}}}')
    with pytest.raises(DeepShareError, match="sensitivity.heavy.2,2"):
        load_link_catalog(bad)


def test_single_gpu_jobs_cross_no_link_and_are_never_slowed():
    state = tiny_state()
    assert state.add(RunningJob("one", "heavy", 1, Placement(((0, 1),)))) == {"one"}
    state.add(RunningJob("big", "heavy", 2, Placement.of({0: 1, 1: 1})))
    assert state.ratio("one") == 1.0


def test_nvlink_keeps_intra_node_traffic_private():
    spec = load_topology("a100-16")
    state = LinkContention(TINY).new_state(spec, default_catalog())
    state.add(RunningJob("a", "heavy", 4, Placement(((0, 4),))))
    state.add(RunningJob("b", "heavy", 4, Placement(((0, 4),))))
    assert state.ratio("a") == state.ratio("b") == 1.0  # no NIC, no PCIe copies, NVLink private


def test_unknown_models_use_common_model_or_proxy_parameters():
    links = default_link_catalog()
    assert links.resolve("ResNet-50") == "resnet50"
    assert links.resolve("vgg19") == "vgg19"
    assert links.resolve("my_bert_thing") == default_catalog().resolve("my_bert_thing")
    assert links.params["vgg19"].nic_s > links.params["resnet50"].nic_s  # 144 M vs 26 M parameters


@pytest.mark.parametrize("first", ["default", "custom"])
def test_an_unknown_models_proxy_follows_the_workload_catalog_asked(first):
    """The link catalog remembered a proxy by model name alone, and the default link catalog is
    one per process: whichever workload catalog asked first fixed the proxy for every later one."""
    custom = Catalog({ProfileKey("FSDP", 2, 2): 10.0, ProfileKey("FSDP", 4, 2): 18.0},
                     {(ProfileKey("FSDP", 2, 2), ProfileKey("FSDP", 2, 2)): 0.5})
    catalogs = {"default": default_catalog(), "custom": custom}
    assert custom.resolve(f"resolve-{first}-net") == "FSDP" != default_catalog().resolve(f"resolve-{first}-net")
    links = default_link_catalog()
    for name in (first, *(set(catalogs) - {first})):
        catalog = catalogs[name]
        assert links.resolve(f"resolve-{first}-net", catalog) == catalog.resolve(f"resolve-{first}-net")
    assert links.resolve("ResNet-50", custom) == "resnet50"  # a name of its own still wins over any proxy


def test_bad_link_parameter_files_are_reported(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"models": {"x": {"compute_s": -1}}}')
    with pytest.raises(DeepShareError, match="p.json"):
        load_link_catalog(bad)
    with pytest.raises(DeepShareError, match="compute_s"):
        LinkParams(compute_s=-1.0, nic_s=1, pcie_s=1, overlap=0.5, samples_per_gpu=1)
    with pytest.raises(DeepShareError, match="overlap"):
        LinkParams(compute_s=1.0, nic_s=1, pcie_s=1, overlap=1.5, samples_per_gpu=1)


# -- calibration -------------------------------------------------------------------------------
def synthetic_truth(model: PairModel) -> np.ndarray:
    """Known parameters for two models: overlap 0.5, the ring formula's shape, kappa 1, a
    sensitivity of 1.25 on one placement and 1 elsewhere (the ridge prior on sensitivities biases
    the recovery of larger ones)."""
    per_model = np.log([[0.2, 0.5, 0.02, 1.0, 16, 0.01, 0.2, 0.3], [0.6, 0.1, 0.01, 1.0, 64, 0.02, 0.1, 0.1]])
    per_model[:, 3] = 0.0  # overlap 0.5 (logistic of 0)
    per_model = np.hstack([per_model, np.zeros((2, 2))])  # exponents 0
    sensitivity = np.zeros(len(model.data.keys))
    sensitivity[2] = np.log(1.25)
    return np.concatenate([per_model.reshape(-1), np.zeros(4), sensitivity])


def synthetic_catalog() -> tuple[Catalog, np.ndarray]:
    """Profiles generated by the pair model itself from known parameters (2 models)."""
    keys = [ProfileKey(m, g, n) for m in ("A", "B") for g, n in ((2, 2), (4, 2), (4, 4), (8, 2), (8, 4))]
    placeholder = Catalog({k: 1.0 for k in keys}, {(v, a): 1.0 for v in keys for a in keys})
    model = PairModel(Dataset.from_catalog(placeholder))
    truth = synthetic_truth(model)
    throughput, ratio = model.predict(truth)
    data = model.data
    isolated = {k: float(t) for k, t in zip(data.keys, throughput)}
    ratios = {(data.keys[v], data.keys[a]): float(r) for v, a, r in zip(data.victim, data.aggressor, ratio)}
    return Catalog(isolated, ratios), truth


@pytest.mark.slow  # a multi-start calibration fit
def test_calibration_recovers_a_synthetic_table():
    catalog, truth = synthetic_catalog()
    result = calibrate(catalog, folds=2, starts=2, seed=0)
    assert result.fit_mae < 0.005
    assert result.cv_mae < 0.01
    assert result.isolated_log_error < 0.01
    # Single parameters are not identifiable from pairs (compute and communication trade off
    # through the overlap), so recovery is judged by what the parameters predict beyond the
    # table: three jobs sharing links at once, which no measured cell contains.
    true_catalog = PairModel(Dataset.from_catalog(catalog)).to_catalog(truth, "truth")
    topo = load_topology("testbed")
    three = [
        RunningJob("x", "A", 4, Placement.of({0: 2, 1: 2})),
        RunningJob("y", "B", 4, Placement.of({0: 1, 1: 1, 2: 1, 3: 1})),
        RunningJob("z", "A", 2, Placement.of({1: 1, 2: 1})),
    ]
    ratios = []
    for links in (true_catalog, result.catalog):
        state = LinkContention(links).new_state(topo, catalog)
        for job in three:
            state.add(job)
        ratios.append([state.ratio(j.job_id) for j in three])
    assert ratios[1] == pytest.approx(ratios[0], abs=0.03)
    assert min(ratios[0]) < 0.9  # the scenario really is contended


def test_nearest_cell_reference_on_a_hand_case():
    a22, a42, a84 = ProfileKey("A", 2, 2), ProfileKey("A", 4, 2), ProfileKey("A", 8, 4)
    keys = [a22, a42, a84]
    table = {(v, a): 0.9 for v in keys for a in keys}
    table[(a22, a42)], table[(a42, a22)], table[(a42, a42)] = 0.6, 0.8, 0.1
    data = Dataset.from_catalog(Catalog({k: 1.0 for k in keys}, table))
    cell = {(data.keys[v], data.keys[a]): i for i, (v, a) in enumerate(zip(data.victim, data.aggressor))}
    test = np.array([cell[(a22, a22)]])
    train = np.setdiff1d(np.arange(len(data.ratio)), test)
    # (A,2,2) vs (A,2,2): the two cells one log2 step away are (2,2)x(4,2) and (4,2)x(2,2)
    assert nearest_cell_prediction(data, train, test)[0] == pytest.approx((0.6 + 0.8) / 2)


def test_nearest_cell_reference_never_sees_the_held_out_cells():
    data = Dataset.from_catalog(default_catalog())
    test = np.arange(0, len(data.ratio), 5)
    train = np.setdiff1d(np.arange(len(data.ratio)), test)
    before = nearest_cell_prediction(data, train, test)
    scrambled = Dataset(**{**data.__dict__, "ratio": data.ratio.copy()})
    scrambled.ratio[test] = 0.0
    assert np.array_equal(nearest_cell_prediction(scrambled, train, test), before)


def test_the_shipped_parameters_record_a_fit_that_meets_the_targets():
    """What `deepshare calibrate --out` recorded when it made the shipped file (a record, not a refit:
    the refit takes minutes; `deepshare calibrate --profiles deepshare/data/profiles` reproduces it)."""
    import json
    from importlib import resources

    doc = json.loads((resources.files("deepshare.data") / "link_params.json").read_text(encoding="utf-8"))
    fit = doc["fit"]
    assert fit["cells"] == 900 and fit["folds"] == 5
    assert fit["fit_mae"] <= 0.08 and fit["cv_mae"] <= 0.12
    assert fit["cv_mae"] < fit["baseline_mean_mae"] and fit["cv_mae"] < fit["baseline_nearest_mae"]
    # and the file's parameters still reproduce the recorded in-fit error with today's physics
    data = Dataset.from_catalog(default_catalog())
    pair = PairModel(data)
    _, predicted = pair.predict(pair.pack(default_link_catalog()))
    assert np.abs(predicted - data.ratio).mean() == pytest.approx(fit["fit_mae"], abs=1e-9)


def test_calibrate_rejects_bad_arguments():
    with pytest.raises(DeepShareError, match="folds"):
        calibrate(default_catalog(), folds=1)
    with pytest.raises(DeepShareError, match="starts"):
        calibrate(default_catalog(), starts=0)


# -- simulations under the link model ------------------------------------------------------------
@pytest.mark.slow  # every bundled trace under the link model
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_link_model_finishes_every_bundled_trace(path):
    sim = Simulator(load_topology("testbed"), load(path).jobs, make_contention("link"))
    report = sim.run(make_policy("las+contention-aware"))
    assert report.finished == 256
    assert report.avg_slowdown >= 1.0


@pytest.mark.parametrize("mix", ["heavy", "low"])
def test_link_model_finishes_generated_traces_on_larger_clusters(mix):
    topo = load_topology("mixed-32")
    trace = generate(300, load=0.9, total_gpus=topo.total_gpus, mix=mix_preset(mix), duration_sigma=1.0, seed=2)
    report = Simulator(topo, trace.jobs, make_contention("link")).run(make_policy("srtf+spread"))
    assert report.finished == 300


@pytest.mark.parametrize("field, value, message", [
    ("nic_s", 1e300, "models.MobileNetV3: link parameter nic_s: expected at most 10000, got 1e+300"),
    ("congestion", 1e300, "models.MobileNetV3: link parameter congestion: expected at most 1000, got 1e+300"),
    ("samples_per_gpu", 1e-300, "models.MobileNetV3: link parameters compute_s and samples_per_gpu must be at least 1e-09"),
])
def test_link_parameters_beyond_any_real_model_are_refused_naming_the_model(tmp_path, field, value, message):
    """1e300 overflowed the physics to NaN ratios: ``simulate`` ran on past two minutes (no end)."""
    import json

    doc = json.loads(default_link_catalog().to_json())
    doc["models"]["MobileNetV3"][field] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DeepShareError) as info:
        load_link_catalog(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_the_largest_link_parameters_allowed_still_simulate_to_a_finite_end(tmp_path):
    import json

    doc = json.loads(default_link_catalog().to_json())
    for params in doc["models"].values():
        params.update(congestion=1000, nic_s=1e4, pcie_s=1e4, latency_s=1e4, pcie_coupling=100, compute_s=1e-9,
                      samples_per_gpu=1e9)
    for row in doc["kappa"].values():
        for aggressor in row:
            row[aggressor] = 1000
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    links = load_link_catalog(path)
    topo = uniform(4, 8)
    trace = generate(40, load=1.0, total_gpus=topo.total_gpus, mix=mix_preset("heavy"), seed=3)
    report = Simulator(topo, trace.jobs, LinkContention(links)).run(make_policy("las+consolidated"))
    assert report.finished == 40 and np.isfinite(report.avg_jct_s) and report.avg_slowdown > 1
