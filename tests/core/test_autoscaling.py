"""Autoscaling in simulation: exact cost and GPU-hours on hand cases, invariants, the CLI."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepshare.cli import main
from deepshare.core.autoscaling import (
    AUTOSCALE_KEYS,
    AutoscaleSpec,
    Autoscaler,
    AutoscaledPolicy,
    build_slots,
    make_autoscaler,
    parse_autoscale_spec,
    simulate_autoscaled,
)
from deepshare.core.autoscaling.autoscaler import slowdown
from deepshare.core.contention import make_contention
from deepshare.core.metrics import REPORT_KEYS
from deepshare.core.simulator import Simulator
from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision, JobSpec
from deepshare.core.view import JobView
from deepshare.policies import make_policy

ROOT = Path(__file__).resolve().parents[2]
MODEL = "MobileNetV3"


def spec(idle=50.0, max_workers=None, **types) -> AutoscaleSpec:  # type: ignore[no-untyped-def]
    node_types = {}
    for name, (gpus, price, lo, hi, boot) in types.items():
        node_types[name] = dict(gpus=gpus, price_usd_per_hour=price, min_nodes=lo, max_nodes=hi, provisioning_s=boot)
    capped = {} if max_workers is None else {"max_workers": max_workers}
    return AutoscaleSpec.model_validate({"name": "t", "idle_timeout_s": idle, "node_types": node_types, **capped})


def job(i: int, gpus: int, duration: float, submit: float = 0.0, model: str = MODEL) -> JobSpec:
    return JobSpec(f"j{i}", model, gpus, submit_time=submit, duration_s=duration)


def run(s: AutoscaleSpec, jobs, autoscaler="demand", policy="fifo+consolidated", contention="none"):  # type: ignore[no-untyped-def]
    return simulate_autoscaled(s, jobs, make_policy(policy), autoscaler, make_contention(contention))[0]


def tight(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-9)


# -- exact hand cases ----------------------------------------------------------------------
def test_one_job_waits_for_a_node_then_the_node_idles_out():
    # 4-GPU nodes at $3.60/h = $0.001/s, ready 100 s after the request, removed after 50 idle s.
    r = run(spec(n=(4, 3.6, 0, 2, 100.0)), [job(1, 4, 1000.0)])
    (rec,) = r.metrics.records
    assert (rec.first_start_s, rec.finish_s) == (100.0, 1100.0)  # JCT includes the boot wait
    assert [(e.time_s, e.kind, e.node) for e in r.events] == [
        (0.0, "request", "n-0"), (100.0, "ready", "n-0"), (1150.0, "terminate", "n-0")]
    assert r.end_s == 1150.0
    assert r.cost_usd == tight(1.15)  # billed from the request (0) to termination (1150)
    assert r.gpu_hours == tight(4 * 1150 / 3600)
    assert r.busy_gpu_hours == tight(4 * 1000 / 3600)
    assert r.idle_gpu_hours == tight(4 * 150 / 3600)  # 100 s booting + 50 s idle
    assert r.metrics.gpu_util == tight(1000 / 1150)
    assert (r.scale_ups, r.scale_downs) == (1, 1)


def test_a_job_arriving_within_the_idle_timeout_reuses_the_node():
    r = run(spec(n=(4, 3.6, 0, 2, 100.0)), [job(1, 4, 1000.0), job(2, 4, 500.0, submit=1120.0)])
    recs = {x.job_id: x for x in r.metrics.records}
    assert (recs["j2"].first_start_s, recs["j2"].finish_s) == (1120.0, 1620.0)
    assert [(e.time_s, e.kind) for e in r.events] == [(0.0, "request"), (100.0, "ready"), (1670.0, "terminate")]
    assert r.cost_usd == tight(1.67)
    assert r.idle_gpu_hours == tight(4 * (100 + 20 + 50) / 3600)


def test_the_cluster_never_grows_past_max_nodes():
    r = run(spec(n=(4, 3.6, 0, 2, 100.0)), [job(i, 4, 1000.0) for i in range(3)])
    assert r.scale_ups == 2 and r.max_nodes_up == 2
    finishes = sorted(x.finish_s for x in r.metrics.records)
    assert finishes == [1100.0, 1100.0, 2100.0]  # the third job waits for a node to free
    assert r.cost_usd == tight(2 * 0.001 * 2150 - 0.001 * 1000)  # node 1 idles out at 1150, node 0 at 2150


def test_min_nodes_are_up_from_zero_billed_to_the_end_and_never_removed():
    jobs = [job(1, 4, 1000.0, submit=10.0), job(2, 4, 400.0, submit=20.0), job(3, 4, 400.0, submit=20.0)]
    r = run(spec(n=(4, 3.6, 1, 3, 100.0)), jobs)
    recs = {x.job_id: x for x in r.metrics.records}
    assert recs["j1"].first_start_s == 10.0  # no boot wait on the min node
    assert recs["j2"].first_start_s == recs["j3"].first_start_s == 120.0  # two nodes requested at 20, ready at 120
    assert recs["j2"].finish_s == recs["j3"].finish_s == 520.0
    assert [(e.time_s, e.kind) for e in r.events if e.kind == "terminate"] == [(570.0, "terminate")] * 2
    assert r.end_s == 1010.0  # the last finish; the min node stays
    assert r.cost_usd == tight(0.001 * (1010 + 2 * 550))
    assert r.gpu_hours == tight(4 * (1010 + 2 * 550) / 3600)


def test_fixed_cluster_is_up_all_the_time_and_never_scales():
    r = run(spec(n=(4, 3.6, 0, 2, 100.0)), [job(1, 4, 1000.0, submit=60.0)], autoscaler="fixed")
    assert (r.scale_ups, r.scale_downs, r.end_s) == (0, 0, 1060.0)
    assert r.cost_usd == tight(2 * 0.001 * 1060)
    assert r.metrics.records[0].first_start_s == 60.0


def test_demand_prefers_the_type_that_covers_the_demand_with_the_fewest_nodes():
    s = spec(small=(4, 4.0, 0, 8, 10.0), big=(8, 30.0, 0, 2, 10.0))
    r = run(s, [job(1, 8, 100.0)])
    assert [(e.kind, e.node_type) for e in r.events if e.kind == "request"] == [("request", "big")]
    r = run(s, [job(1, 4, 100.0)])
    assert [(e.kind, e.node_type) for e in r.events if e.kind == "request"] == [("request", "small")]


def test_jobs_larger_than_the_largest_cluster_are_rejected_not_waited_for():
    r = run(spec(n=(4, 3.6, 0, 2, 100.0)), [job(1, 16, 100.0), job(2, 4, 100.0)])
    assert (r.metrics.rejected, r.metrics.finished) == (1, 1)


def test_taking_down_a_busy_node_is_refused():
    s = spec(n=(4, 3.6, 1, 1, 0.0))
    slots = build_slots(s)
    scaler = make_autoscaler("demand", s, slots)
    sim = Simulator(slots.topology, [job(1, 4, 100.0)], make_contention("none"), control=scaler)
    policy = AutoscaledPolicy(make_policy("fifo+consolidated"), scaler)
    view = sim.advance()
    sim.apply(policy.decide(view))
    with pytest.raises(DeepShareError, match="still runs jobs"):
        sim.set_node_up(0, False)


# -- invariants ------------------------------------------------------------------------------
@st.composite
def scenarios(draw):  # type: ignore[no-untyped-def]
    n_types = draw(st.integers(1, 2))
    types = {}
    for k in range(n_types):
        gpus = draw(st.sampled_from([2, 4, 8]))
        lo = draw(st.integers(0, 1))
        hi = draw(st.integers(max(1, lo), 3))
        types[f"t{k}"] = (gpus, draw(st.sampled_from([1.0, 3.6, 7.2])), lo, hi, float(draw(st.integers(0, 3)) * 60))
    s = spec(idle=float(draw(st.sampled_from([0, 30, 300]))), **types)
    n_jobs = draw(st.integers(1, 7))
    jobs = [
        job(i, draw(st.sampled_from([1, 2, 4, 8])), float(draw(st.integers(1, 20)) * 100),
            submit=float(draw(st.integers(0, 30)) * 60), model=draw(st.sampled_from(["MoE", "FSDP", MODEL])))
        for i in range(n_jobs)
    ]
    return s, jobs


@dataclass(frozen=True)
class Applied:
    """One decision the simulator applied, with each launch's predicted slowdown at that moment
    (predictions read the live contention state, so they are taken before the decision applies)."""

    now: float
    up_gpus: int
    decision: Decision
    launches: tuple[tuple[JobView, float], ...]


class Recorder:
    """Wraps the autoscaled policy: records every decision the simulator applies."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.name, self.log = inner, inner.name, []

    def decide(self, view):  # type: ignore[no-untyped-def]
        decision = self.inner.decide(view)
        queued = {j.job_id: j for j in view.queued}
        pending, launches = [], []
        for launch in decision.launch:
            j = queued[launch.job_id]
            launches.append((j, slowdown(view, j, launch.placement, pending)))
            pending.append((j, launch.placement))
        self.log.append(Applied(view.now, view.total_gpus, decision, tuple(launches)))
        return decision


def run_recorded(s, jobs, autoscaler, policy, contention="profiled"):  # type: ignore[no-untyped-def]
    slots = build_slots(s)
    scaler = make_autoscaler(autoscaler, s, slots)
    sim = Simulator(slots.topology, jobs, make_contention(contention), control=scaler)
    rec = Recorder(AutoscaledPolicy(make_policy(policy), scaler))
    metrics = sim.run(rec)
    from deepshare.core.autoscaling.report import build_autoscale_report

    return build_autoscale_report(scaler, metrics), rec.log, slots


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["demand", "contention-aware", "fixed"]), st.sampled_from(["fifo+consolidated", "las+spread"]))
def test_autoscaling_invariants(scenario, autoscaler, policy):
    s, jobs = scenario
    r, log, slots = run_recorded(s, jobs, autoscaler, policy)
    m = r.metrics
    max_gpus = slots.topology.total_gpus
    assert m.finished == sum(j.gpus <= max_gpus for j in jobs) and m.rejected == len(jobs) - m.finished
    # never above max nor below min, at every instant something changed
    times = sorted({0.0, *(i.requested_s for i in r.instances), *(i.terminated_s for i in r.instances if i.terminated_s)})
    for t in times:
        for name, t_spec in s.node_types.items():
            alive = [i for i in r.instances if i.node_type == name and i.requested_s <= t
                     and (i.terminated_s is None or i.terminated_s > t)]
            assert t_spec.min_nodes <= len(alive) <= t_spec.max_nodes
    # a node is removed only after idling for the timeout (and never by the fixed cluster)
    busy: dict[int, list[tuple[float, float]]] = {}
    finish = {x.job_id: x.finish_s for x in m.records}
    for applied in log:
        for launch in applied.decision.launch:
            for node, _ in launch.placement.alloc:
                busy.setdefault(node, []).append((applied.now, finish[launch.job_id]))
    for inst in r.instances:
        if inst.terminated_s is None:
            continue
        assert autoscaler != "fixed"
        assert inst.ready_s + s.idle_timeout_s <= inst.terminated_s
        for start, stop in busy.get(inst.node, []):
            # 1e-6: a record's finish time is computed from rates and may sit an ulp after its event
            assert stop <= inst.terminated_s - s.idle_timeout_s + 1e-6 or start >= inst.terminated_s
    # cost and GPU-hours are the exact sums over billed node time
    assert r.cost_usd == tight(sum(i.price_usd_per_hour * i.billed_s(r.end_s) for i in r.instances) / 3600)
    assert r.gpu_hours == tight(sum(i.gpus * i.billed_s(r.end_s) for i in r.instances) / 3600)
    assert r.idle_gpu_hours == tight(r.gpu_hours - sum(x.gpu_time_s for x in m.records) / 3600)
    assert r.idle_gpu_hours >= -1e-9
    assert r.end_s == max([0.0, *(x.finish_s for x in m.records if x.finish_s is not None),
                           *(i.terminated_s for i in r.instances if i.terminated_s is not None)])
    # same inputs, same run
    again = run(s, jobs, autoscaler, policy, contention="profiled")
    assert again.to_dict() == r.to_dict() and again.events == r.events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["las+spread", "fifo+consolidated", "srtf+contention-aware"]))
def test_contention_aware_never_colocates_above_its_threshold_while_it_may_still_scale(scenario, policy):
    s, jobs = scenario
    s = s.model_copy(update={"max_slowdown": 1.1})
    r, log, slots = run_recorded(s, jobs, "contention-aware", policy)
    for applied in log:
        scalable = slots.topology.total_gpus - applied.up_gpus  # GPUs being provisioned or still addable
        for j, predicted in applied.launches:
            if predicted > s.max_slowdown:
                assert j.gpus > scalable, f"co-located {j.job_id} at t={applied.now} with {scalable} GPUs still to come"


def spread_case() -> tuple[AutoscaleSpec, list[JobSpec]]:
    """Two 8-GPU jobs (DLRM, FSDP) on four 4-GPU nodes under las+spread: the second shares all
    four nodes with the first unless the cluster scales out."""
    s = spec(idle=300.0, n=(4, 3.6, 4, 8, 120.0)).model_copy(update={"max_slowdown": 1.1})
    return s, [job(1, 8, 3600.0, model="DLRM"), job(2, 8, 3600.0, submit=60.0, model="FSDP")]


def test_the_threshold_matters_demand_colocates_where_contention_aware_scales_out():
    s, jobs = spread_case()
    demand, log, _ = run_recorded(s, jobs, "demand", "las+spread")
    assert max(x for a in log for _, x in a.launches) > s.max_slowdown and demand.scale_ups == 0  # not vacuous
    aware, log, _ = run_recorded(s, jobs, "contention-aware", "las+spread")
    assert max(x for a in log for _, x in a.launches) <= s.max_slowdown
    assert aware.scale_ups >= 1 and aware.metrics.avg_slowdown == tight(1.0)
    assert aware.metrics.avg_slowdown < demand.metrics.avg_slowdown


# -- specs and the CLI -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, needle",
    [
        ("node_types: {a: {gpus: 4, price_usd_per_hour: 1, min_nodes: 3, max_nodes: 2}}\n", "min_nodes 3 exceeds max_nodes 2"),
        ("node_types: {a: {gpus: 4, price_usd_per_hour: 1}}\n", "node_types.a.max_nodes"),
        ("node_types: {a: {gpus: 4, price_usd_per_hour: -1, max_nodes: 2}}\n", "price_usd_per_hour"),
        ("node_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2, colour: red}}\n", "colour"),
        ("idle_timeout_s: -5\nnode_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2}}\n", "idle_timeout_s"),
        ("max_slowdown: 0.5\nnode_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2}}\n", "max_slowdown"),
        ("node_types: {}\n", "node_types"),
        ("[1, 2]\n", "expected a mapping"),
        ("rack_uplink_gbps: 1.0e-9\nnode_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2}}\n",
         "rack_uplink_gbps"),
        ("node_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2, nic_gbps: 5.0e-324}}\n", "nic_gbps"),
    ],
)
def test_bad_autoscaling_specs_are_named(text, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_autoscale_spec(text, "s.yaml")


TRACE = ROOT / "tests" / "fixtures" / "autoscale" / "burst.csv"
CONFIG = ROOT / "deepshare" / "data" / "autoscale" / "aws-mixed.yaml"


def test_cli_simulate_writes_the_report_keys_and_the_plot(tmp_path, capsys):
    out, png = tmp_path / "r.json", tmp_path / "t.png"
    assert main(["autoscale", "simulate", "--trace", str(TRACE), "--config", str(CONFIG), "--autoscaler",
                 "contention-aware", "--json", str(out), "--plot", str(png)]) == 0
    doc = json.loads(out.read_text())
    assert set(REPORT_KEYS) | set(AUTOSCALE_KEYS) <= set(doc)
    assert doc["finished"] == doc["jobs"] and doc["cost_usd"] > 0 and png.stat().st_size > 10_000


def test_cli_compare_runs_every_autoscaler_on_the_same_trace(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["autoscale", "compare", "--trace", str(TRACE), "--config", str(ROOT / "cluster_yamls" / "aws-gpu-mixed.yaml"),
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["autoscalers"] == ["demand", "contention-aware", "fixed"]
    results = doc["results"]
    assert results["fixed"]["scale_ups"] == 0 and results["demand"]["scale_ups"] > 0
    assert results["fixed"]["cost_usd"] > results["demand"]["cost_usd"]  # a bursty trace: scaling saves money
    assert len({r["jobs"] for r in results.values()}) == 1


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--autoscaler", "magic"], "unknown autoscaler 'magic'"),
        (["--autoscaler", "demand,demand"], "repeated"),
        (["--policy", "nope"], "--policy"),
        (["--json", "/no/such/dir/r.json"], "--json"),
    ],
)
def test_cli_bad_flags_exit_2_with_one_line(extra, needle, capsys):
    assert main(["autoscale", "simulate", "--trace", str(TRACE), "--config", str(CONFIG), *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_bad_config_names_the_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("node_types: {a: {gpus: 0, price_usd_per_hour: 1, max_nodes: 2}}\n")
    assert main(["autoscale", "simulate", "--trace", str(TRACE), "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "node_types.a.gpus" in err
    assert main(["autoscale", "simulate", "--trace", str(TRACE), "--config", str(tmp_path / "none.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2)), max_size=60))
def test_the_pools_counts_are_the_slots_states(ops):
    """NodePool.count keeps per-type counts as states change (it was a scan of the type's slots at
    every idle timer): after any sequence of requests, readies and terminations each count equals
    the scan."""
    from deepshare.core.autoscaling.pool import OFF, PENDING, UP, NodePool

    s = spec(a=(4, 1.0, 0, 5, 10.0), b=(8, 2.0, 0, 3, 10.0))
    pool = NodePool(s, build_slots(s))
    for node_type, op in ops:
        slots = pool.slots.by_type[node_type]
        if op == 0 and pool.room(node_type) > 0:
            pool.request(node_type, 0.0)
        elif op == 1:
            pending = [n for n in slots if pool.state[n] == PENDING]
            if pending:
                pool.mark_ready(pending[0])
        elif op == 2:
            up = [n for n in slots if pool.state[n] == UP]
            if up:
                pool.terminate(up[-1], 1.0)
        for t in ("a", "b"):
            for states in ((PENDING, UP), (PENDING,), (UP,), (OFF,), (OFF, UP)):
                assert pool.count(t, states) == sum(1 for n in pool.slots.by_type[t] if pool.state[n] in states)


def test_jobs_no_node_set_can_hold_are_reported_on_stderr(tmp_path, capsys):
    """The table counted them out of "done" and said nothing; simulate warns of rejected jobs."""
    config = tmp_path / "small.yaml"
    config.write_text("name: small\nnode_types: {a: {gpus: 1, price_usd_per_hour: 1, max_nodes: 1}}\n")
    trace = tmp_path / "t.csv"
    assert main(["trace", "generate", "--jobs", "10", "--load", "0.9", "--nodes", "2", "--seed", "1", "--out", str(trace)]) == 0
    capsys.readouterr()
    assert main(["autoscale", "simulate", "--trace", str(trace), "--config", str(config), "--autoscaler", "fixed"]) == 0
    err = capsys.readouterr().err
    assert "10 job(s) ask for more GPUs than the most nodes small can bring up (a: 0..1 x 1 GPUs $1/h)" in err


# -- found by a review of the autoscaling invariants (each case stalled or misbilled before) --------
def events(report) -> list[tuple[float, str, str]]:  # type: ignore[no-untyped-def]
    return [(e.time_s, e.kind, e.node) for e in report.events]


@pytest.mark.parametrize("autoscaler", ["demand", "contention-aware", "fixed"])
def test_a_job_larger_than_max_workers_allows_is_rejected(autoscaler):
    # 4 slots of 4 GPUs, but at most one node at once: an 8-GPU job can never run
    report = run(spec(idle=10.0, max_workers=1, n=(4, 1.0, 0, 4, 100.0)), [job(1, 8, 100.0), job(2, 4, 100.0)], autoscaler)
    assert (report.metrics.rejected, report.metrics.finished) == (1, 1)


def test_an_idle_node_gives_its_worker_slot_to_the_node_a_queued_job_needs():
    # max_workers 1: the 2-GPU node stays up after j1 while j2 (4 GPUs) waits for a node it cannot
    # have; it now idles out (30 s) and the 8-GPU node comes for j2 (it stalled at t=100 before)
    s = spec(idle=30.0, max_workers=1, small=(2, 1.0, 0, 1, 0.0), big=(8, 4.0, 0, 1, 0.0))
    report = run(s, [job(1, 1, 100.0), job(2, 4, 100.0, submit=10.0)])
    assert events(report)[2:4] == [(130.0, "terminate", "small-0"), (130.0, "request", "big-0")]
    assert report.metrics.finished == 2


def test_fixed_brings_every_types_min_nodes_up_first():
    # max_workers 2: filling the types in order took both slots with small nodes, and big's
    # min_nodes (1) never came up: a 4-GPU job stalled
    s = spec(max_workers=2, small=(1, 1.0, 0, 2, 0.0), big=(4, 4.0, 1, 1, 0.0))
    report = run(s, [job(1, 4, 3600.0)], "fixed")
    assert report.metrics.finished == 1 and sorted(i.node_type for i in report.instances) == ["big", "small"]
    assert report.cost_usd == pytest.approx(5.0)


def test_a_min_node_stays_up_while_its_replacement_is_still_provisioning():
    # n-1 is requested at 10 for j2, which then runs on n-0; n-0 (min 1) idled out at 80 while
    # n-1 booted until 310, so j3 (at 100) waited for it. Now n-0 stays: j3 runs 100-200
    s = spec(idle=30.0, n=(4, 3.6, 1, 2, 300.0))
    report = run(s, [job(1, 4, 20.0), job(2, 4, 30.0, submit=10.0), job(3, 4, 100.0, submit=100.0)])
    assert events(report) == [(10.0, "request", "n-1"), (310.0, "ready", "n-1"), (340.0, "terminate", "n-1")]
    assert report.cost_usd == pytest.approx(0.001 * (340 + 330))


def test_a_node_is_not_removed_at_the_instant_a_job_arrives():
    # j2 arrives at 1050, the very instant n-0's idle timer (j1 done at 1000, 50 s) fires
    s = spec(idle=50.0, n=(4, 3.6, 0, 2, 100.0))
    report = run(s, [job(1, 4, 900.0), job(2, 4, 100.0, submit=1050.0)])
    assert [e for e in events(report) if e[1] == "terminate"] == [(1200.0, "terminate", "n-0")]
    assert report.cost_usd == pytest.approx(0.001 * 1200)


def test_contention_aware_counts_only_the_nodes_max_workers_lets_it_add():
    # the same reachable cluster (4 nodes of 4 GPUs up) said two ways: with 8 slots but max_workers 4
    # it held j2 back for nodes it could never request, until j1 finished
    jobs = [job(1, 8, 4000.0, model="DLRM"), job(2, 8, 3000.0, submit=60.0, model="FSDP")]
    plain = run(spec(n=(4, 1.0, 4, 4, 0.0)), jobs, "contention-aware", "las+spread", "profiled")
    capped = run(spec(max_workers=4, n=(4, 1.0, 4, 8, 0.0)), jobs, "contention-aware", "las+spread", "profiled")
    assert capped.metrics.avg_jct_s == pytest.approx(plain.metrics.avg_jct_s)


@pytest.mark.parametrize("autoscaler", ["demand", "contention-aware"])
def test_a_job_requiring_one_rack_gets_nodes_in_one_rack(autoscaler):
    # 4 GPUs up in each of two racks: enough in all, too few in either; the job requires one rack,
    # so a second node of rack r1 is requested (nothing was, and the run stalled at t=0)
    from deepshare.core.fabric import TopologyRequest

    s = AutoscaleSpec.model_validate({"name": "t", "idle_timeout_s": 30.0, "node_types": {
        "a": dict(gpus=4, price_usd_per_hour=1.0, min_nodes=1, max_nodes=1, provisioning_s=60.0, rack="r0"),
        "b": dict(gpus=4, price_usd_per_hour=1.0, min_nodes=1, max_nodes=2, provisioning_s=60.0, rack="r1")}})
    jobs = [JobSpec("j1", MODEL, 8, submit_time=0.0, duration_s=100.0, topology=TopologyRequest(required_level="rack"))]
    report = run(s, jobs, autoscaler, "fifo+topo-aware")
    assert events(report)[:2] == [(0.0, "request", "b-1"), (60.0, "ready", "b-1")]
    assert report.metrics.finished == 1


def test_useful_util_and_fragmentation_are_over_billed_gpu_hours_as_gpu_util_is():
    # one 1-GPU node of two slots boots for 600 s, runs one 3,600-s job, then idles out after 50 s:
    # billed 4,250 GPU-s, the job's 3,600 all useful; the simulator's own figure divided by both
    # slots over the makespan (3,600 / (2 x 4,200) = 0.43)
    report = run(spec(n=(1, 1.0, 0, 2, 600.0)), [job(1, 1, 3600.0)])
    assert report.metrics.gpu_util == pytest.approx(3600 / 4250)
    assert report.metrics.useful_util == pytest.approx(3600 / 4250)
    assert report.metrics.fragmentation_share == 0.0


# -- max_workers reached: a node is removed for room only if another type comes for the demand ------
class EventCapped(Autoscaler):
    """The demand autoscaler, stopped after ``CAP`` scale events: a run that would cycle for ever
    at one instant fails here instead of hanging the test (no timed assertion)."""

    CAP = 40

    def _log(self, kind: str, node: int) -> None:
        if len(self.events) >= self.CAP:
            raise AssertionError(f"more than {self.CAP} scale events: {self.events[-4:]}")
        super()._log(kind, node)


def run_event_capped(s: AutoscaleSpec, jobs):  # type: ignore[no-untyped-def]
    slots = build_slots(s)
    scaler = EventCapped(s, slots)
    sim = Simulator(slots.topology, jobs, make_contention("none"), control=scaler)
    metrics = sim.run(AutoscaledPolicy(make_policy("fifo+consolidated"), scaler))
    return scaler, {r.job_id: r.first_start_s for r in metrics.records}


def test_a_capped_autoscaler_keeps_the_node_it_would_request_again_with_zero_timeouts():
    # one type of 4-GPU nodes (3 slots), max_workers 2, idle timeout and boot 0: j1 (2 GPUs) runs on
    # n-0, j3 (8 GPUs) needs n-1 and a third node max_workers refuses. n-1 was removed "for room",
    # requested again for j3 and booted at t=10 for ever; now it stays and j3 waits for j1 (ends 2000)
    s = spec(idle=0.0, max_workers=2, n=(4, 3.6, 0, 3, 0.0))
    scaler, starts = run_event_capped(s, [job(1, 2, 2000.0), job(3, 8, 100.0, submit=10.0)])
    assert [(e.time_s, e.kind, e.node) for e in scaler.events[:4]] == [
        (0.0, "request", "n-0"), (0.0, "ready", "n-0"), (10.0, "request", "n-1"), (10.0, "ready", "n-1")]
    assert (scaler.scale_ups, scaler.scale_downs) == (2, 2)
    assert starts == {"j1": 0.0, "j3": 2000.0}


def test_a_capped_autoscaler_does_not_thrash_the_node_the_queued_job_needs():
    # the same with idle 30 s and boot 100 s: n-1 idled out at 140, came back at 240, out at 270 ...
    # (18 scale-ups and downs; j3 started at 2190, $4.666); now n-0 and n-1 stay until j3 is done
    s = spec(idle=30.0, max_workers=2, n=(4, 3.6, 0, 3, 100.0))
    report = run(s, [job(1, 2, 2000.0), job(3, 8, 100.0, submit=10.0)])
    finish = {r.job_id: r.finish_s for r in report.metrics.records}["j3"]
    assert events(report) == [(0.0, "request", "n-0"), (10.0, "request", "n-1"), (100.0, "ready", "n-0"),
                              (110.0, "ready", "n-1"), (finish + 30, "terminate", "n-0"), (finish + 30, "terminate", "n-1")]
    assert {r.job_id: r.first_start_s for r in report.metrics.records} == {"j1": 100.0, "j3": 2100.0}
    assert report.cost_usd == pytest.approx(0.001 * ((finish + 30) + (finish + 30 - 10)))


def test_no_second_removal_for_room_at_an_instant_that_requested_the_removed_type_again():
    # the backstop of the rule above: two types (small 2 GPUs, big 8), max_workers 2, small-0 up
    # (min 1). A small node removed for room at t=0 and requested again at t=0 (small-1): while an
    # 8-GPU job waits, removing a small node would make room for big (10 GPUs wanted, big covers
    # 8), but not at this instant any more
    import math

    s = spec(idle=0.0, max_workers=2, small=(2, 1.0, 1, 3, 0.0), big=(8, 4.0, 0, 1, 0.0))
    slots = build_slots(s)
    scaler = make_autoscaler("demand", s, slots)
    Simulator(slots.topology, [job(1, 8, 100.0, submit=5.0)], make_contention("none"), control=scaler)
    scaler._room_made = (0.0, {"small"})
    assert scaler._request(2, ["small"]) == [1] and scaler._room_frozen_at == 0.0  # small-1
    scaler._shortfall = (8, None)  # the 8-GPU job's request, cut short by max_workers
    assert not scaler._makes_room("small")
    scaler._room_frozen_at = -math.inf  # at another instant, with the same demand, it would not either:
    assert not scaler._makes_room("small")  # removed for room and requested again, it stays until...
    scaler._demand = lambda: (frozenset({"j1"}), frozenset())  # ...the demand changes (a job queued, launched, done)
    assert scaler._makes_room("small")


@pytest.mark.parametrize("a_gpus, makes_room", [(4, False), (8, True)])
def test_a_node_is_not_swapped_for_another_type_of_no_more_gpus(a_gpus, makes_room):
    # max_workers 2, b-0 (4 GPUs, min 1) up and b-1 up: a request 4 GPUs short. Removing b-1 would
    # let the cheaper type a be requested; with a of 4 GPUs that covers no more of the shortfall
    # (a boot's delay and cost for nothing), with a of 8 it covers it
    s = spec(idle=0.0, max_workers=2, a=(a_gpus, 1.0, 0, 1, 0.0), b=(4, 2.0, 1, 2, 0.0))
    slots = build_slots(s)
    scaler = make_autoscaler("demand", s, slots)
    Simulator(slots.topology, [job(1, 8, 100.0, submit=5.0)], make_contention("none"), control=scaler)
    assert scaler._request(4, ["b"]) == [2]  # b-1
    scaler._shortfall = (4, None)
    assert scaler._best(8, None, freed="b") == "a"
    assert scaler._makes_room("b") is makes_room


def test_two_rack_jobs_waiting_together_get_their_nodes_at_once():
    # one rack of 4-GPU nodes (2 slots, boot 100 s), two 4-GPU jobs that require one rack queued at
    # 0: n-0, requested for j1, was counted again for j2, whose node came only once n-0 was up (at
    # 100: starts 100 and 200, avg JCT 1,150 s). Now both nodes come at 0, as without the rack
    from deepshare.core.fabric import TopologyRequest

    rack = TopologyRequest(required_level="rack")
    jobs = [JobSpec(f"j{i}", MODEL, 4, submit_time=0.0, duration_s=1000.0, topology=rack) for i in (1, 2)]
    report = run(spec(idle=30.0, n=(4, 3.6, 0, 2, 100.0)), jobs, "demand", "fifo+topo-aware")
    assert [e for e in events(report) if e[1] == "request"] == [(0.0, "request", "n-0"), (0.0, "request", "n-1")]
    assert sorted(r.first_start_s for r in report.metrics.records) == [100.0, 100.0]
    assert report.metrics.avg_jct_s == pytest.approx(1100.0)


def two_racks(**types):  # type: ignore[no-untyped-def]
    """A spec of (gpus, price, min, max, boot, rack) node types, idle timeout 300 s."""
    node_types = {name: dict(gpus=g, price_usd_per_hour=p, min_nodes=lo, max_nodes=hi, provisioning_s=boot, rack=rack)
                  for name, (g, p, lo, hi, boot, rack) in types.items()}
    return AutoscaleSpec.model_validate({"name": "t", "idle_timeout_s": 300.0, "node_types": node_types})


def test_isolated_placements_of_a_rack_required_job_stay_in_one_rack():
    # racks r0 (nodes 0-2) and r1 (3-5) of 4-GPU nodes; idle: node 2 (r0) and node 3 (r1)
    from deepshare.core.autoscaling.contention_aware import isolated_placements
    from deepshare.core.fabric import TopologyRequest

    s = two_racks(a=(4, 1.0, 3, 3, 60.0, "r0"), b=(4, 1.0, 0, 3, 60.0, "r1"))
    topology = build_slots(s).topology
    free, capacity, fabric = [2, 2, 4, 4, 0, 0], (4,) * 6, topology.fabric

    def placements(gpus, request):  # type: ignore[no-untyped-def]
        view = JobView("j", MODEL, gpus, 0.0, 0.0, 0.0, 0, topology=request)
        return [p.alloc for p in isolated_placements(view, free, capacity, fabric)]

    rack = TopologyRequest(required_level="rack")
    assert placements(8, TopologyRequest()) == [((2, 4), (3, 4))]  # over both racks: allowed
    assert placements(8, rack) == []  # 4 idle GPUs per rack: none
    assert placements(4, rack) == [((2, 4),), ((3, 4),)]  # one per rack


def test_contention_aware_holds_a_rack_required_job_rather_than_split_it_across_racks():
    # rack r0: a-0..a-2 up (min 3); rack r1: b-0 up, b-1 and b-2 requestable (60 s boot). j1 and j1b
    # (2 GPUs each) run on a-0 and a-1; the policy puts j2 (8 GPUs, one rack) on a-0, a-1, a-2,
    # too slow (threshold 1.05). It was moved to the idle a-2 + b-0 (two racks) and the run
    # aborted; now it is held back, b-1 and b-2 come at 10 for it, and it starts at 70
    from deepshare.core.fabric import TopologyRequest
    from deepshare.core.types import Launch, Placement

    class Scripted:
        name = "scripted"

        def decide(self, view):  # type: ignore[no-untyped-def]
            where = {"j1": ((0, 1), (1, 1)), "j1b": ((0, 1), (1, 1)), "j2": ((0, 2), (1, 2), (2, 4))}
            return Decision(launch=tuple(Launch(j.job_id, Placement(where[j.job_id])) for j in view.queued))

    s = two_racks(a=(4, 1.0, 3, 3, 60.0, "r0"), b=(4, 1.0, 1, 3, 60.0, "r1")).model_copy(update={"max_slowdown": 1.05})
    jobs = [job(1, 2, 5000.0), JobSpec("j1b", MODEL, 2, submit_time=0.0, duration_s=5000.0),
            JobSpec("j2", "DLRM", 8, submit_time=10.0, duration_s=3000.0, topology=TopologyRequest(required_level="rack"))]
    report, _ = simulate_autoscaled(s, jobs, Scripted(), "contention-aware", make_contention("profiled"))
    assert events(report)[:4] == [(10.0, "request", "b-1"), (10.0, "request", "b-2"),
                                  (70.0, "ready", "b-1"), (70.0, "ready", "b-2")]
    assert {r.job_id: r.first_start_s for r in report.metrics.records}["j2"] == 70.0


@pytest.mark.parametrize(("autoscaler", "a_min"), [("demand", 1), ("contention-aware", 1), ("fixed", 0)])
def test_a_rack_job_no_rack_can_hold_under_max_workers_is_rejected(autoscaler, a_min):
    # racks r0 (a: 4 GPUs, one slot) and r1 (b: 4 GPUs, two slots), max_workers 2: with a-0 up (its
    # min_nodes, or fixed's first type) r1 can have one b node, 4 GPUs. The 8-GPU job that requires
    # one rack was admitted (8 slots' GPUs in r1) and the run stalled; it is now rejected on arrival
    from deepshare.core.fabric import TopologyRequest

    s = two_racks(a=(4, 1.0, a_min, 1, 60.0, "r0"), b=(4, 1.0, 0, 2, 60.0, "r1")).model_copy(update={"max_workers": 2})
    jobs = [JobSpec("j1", MODEL, 8, submit_time=0.0, duration_s=100.0, topology=TopologyRequest(required_level="rack")),
            job(2, 4, 100.0, submit=10.0)]
    report, sim = simulate_autoscaled(s, jobs, make_policy("fifo+topo-aware"), autoscaler, make_contention("none"))
    assert (report.metrics.rejected, report.metrics.finished) == (1, 1)
    assert sim.rejections["j1"].startswith("its topology request: 8 GPUs inside one rack domain, and at most 4")
    assert {r.job_id: r.finish_s for r in report.metrics.records if r.finish_s is not None} == {"j2": 110.0}


def test_a_node_removed_for_room_and_requested_again_at_once_stays_until_the_demand_changes():
    # review of the autoscaler: max_workers 1, idle timeout 0, small (4 GPUs, boot 100 s) and big (8
    # GPUs, boot 0). A 1-GPU job asks for small; a 4-GPU job then finds it 1 GPU short, so small
    # "made room" for big the instant it was up, was removed, and the 1-GPU job asked for it again:
    # every 100 s, forever, the memory growing. Now it stays after the first such swap.
    s = spec(idle=0.0, max_workers=1, small=(4, 1.0, 0, 1, 100.0), big=(8, 1.0, 0, 1, 0.0))
    slots = build_slots(s)
    scaler = make_autoscaler("demand", s, slots)
    sim = Simulator(slots.topology, [job(0, 1, 1000.0, submit=0.0), job(2, 4, 1000.0, submit=10.0)],
                    make_contention("none"), control=scaler)
    metrics = sim.run(AutoscaledPolicy(make_policy("fifo+consolidated"), scaler))
    assert [(e.time_s, e.kind, e.node_type) for e in scaler.events] == [
        (0.0, "request", "small"), (100.0, "ready", "small"), (100.0, "terminate", "small"),
        (100.0, "request", "small"), (200.0, "ready", "small"), (2200.0, "terminate", "small")]
    assert {r.job_id: r.first_start_s for r in metrics.records} == {"j0": 200.0, "j2": 1200.0}


@pytest.mark.parametrize("small_nodes", [1, 3])
def test_a_job_that_requires_a_rack_gets_the_rack_that_can_hold_it(small_nodes):
    # review of the autoscaler: max_workers 1, rack1 of 2-GPU nodes (one busy with a), rack0 of one
    # 8-GPU node; b needs 4 GPUs in one rack. The rack that could take more now (rack1) was chosen,
    # which never holds 4 GPUs, so its idle node never went to make room for rack0's: the run
    # stopped "the policy left 1 job(s) queued on an idle cluster". With 3 small nodes (second
    # read) rack1 "could ever hold" 6 GPUs, but max_workers 1 keeps it to 2.
    from deepshare.core.fabric import TopologyRequest

    s = AutoscaleSpec.model_validate({"name": "t", "idle_timeout_s": 300.0, "max_workers": 1, "node_types": {
        "small": dict(gpus=2, price_usd_per_hour=1.0, max_nodes=small_nodes, provisioning_s=0.0, rack="rack1"),
        "big": dict(gpus=8, price_usd_per_hour=1.0, max_nodes=1, provisioning_s=0.0, rack="rack0")}})
    b = JobSpec("b", "MobileNetV3", 4, submit_time=500.0, duration_s=1.0, topology=TopologyRequest(required_level="rack"))
    r = run(s, [job(1, 1, 1000.0), b])
    assert r.metrics.finished == 2 and r.metrics.rejected == 0


def test_a_swap_blocked_once_is_made_when_other_jobs_wait_even_if_as_many():
    # second read: the demand was counted (jobs queued, GPUs busy); it came back to (2, 0) after
    # real progress (j0 done, j1 and j2 queued) and kept the idle 1-GPU node from making room for
    # the 8-GPU type: the run stopped "the policy left 2 job(s) queued". Job ids tell them apart.
    s = spec(idle=0.0, max_workers=1, big=(8, 1.0, 0, 1, 0.0), small=(1, 1.0, 0, 1, 0.0))
    r = run(s, [job(0, 1, 1000.0), job(1, 4, 100.0), job(2, 2, 100.0, submit=10.0)])
    assert r.metrics.finished == 3


@pytest.mark.parametrize("idle, boot, min_a, a_gpus, c_gpus, max_workers, gpus, submit", [
    (0.0, 0.0, 0, 4, 5, 2, 9, 0.0),  # a-0 and a-1 both went for room, then a was requested again
    (300.0, 100.0, 0, 4, 5, 2, 9, 0.0),  # the same with timeouts and boots (their idle timers end together)
    (0.0, 0.0, 1, 5, 7, 3, 16, 50.0),  # the min_nodes node went too: 5 + 5 + 7 GPUs were needed
])
def test_one_node_goes_for_room_per_shortfall(idle, boot, min_a, a_gpus, c_gpus, max_workers, gpus, submit):
    # fuzz of tiny configs (5 of 18,000 stopped): a job needing a of one type and c of another under
    # max_workers got nodes of a alone; every idle a node then went "for room" at one instant on the
    # stale shortfall, the request for the job from fewer nodes picked a again, and a was kept for good
    # (removed for room and requested again): "the policy left 1 job(s) queued". One goes; the
    # review after it asks for c.
    s = spec(idle=idle, max_workers=max_workers, a=(a_gpus, 1.0, min_a, 3 if min_a else 2, boot), c=(c_gpus, 1.0, 0, 1, boot))
    r = run(s, [job(0, gpus, 100.0, submit=submit)])
    assert (r.metrics.finished, r.metrics.rejected) == (1, 0)
    assert [e.node_type for e in r.events if e.kind == "request"].count("c") == 1


def test_rejected_jobs_are_named_with_who_rejected_them(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("name: c\nmax_workers: 2\nnode_types: {a: {gpus: 4, price_usd_per_hour: 1, max_nodes: 2}, "
                      "c: {gpus: 5, price_usd_per_hour: 1, max_nodes: 1}}\n")
    trace = tmp_path / "t.csv"
    trace.write_text(f"job_id,submit_time,model,gpus,duration_s,total_samples\nnine,0,{MODEL},9,100,\nbig,0,{MODEL},10,100,\n")
    assert main(["autoscale", "simulate", "--trace", str(trace), "--config", str(config), "--policy", "fifo+consolidated",
                 "--autoscaler", "demand,fixed"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "max_workers 2) and were rejected (demand: 1, fixed: 2)" in err and "big (10 GPUs), nine (9 GPUs)" in err
