"""Fairness metrics by hand on a tiny trace, the fairness orders, and `simulate --tenants`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from cli_run import cli, one_error_line
from tenant_cases import job, run

from deepshare.core.topology import uniform
from deepshare.core.view import ClusterView, JobView
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_names
from deepshare.tenants import parse_tenants
from deepshare.tenants.fairness import fairness_report, water_fill
from deepshare.tenants.orders import drf, themis

EQUAL = "queues:\n  - {name: a, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n" \
        "  - {name: b, cohort: c, nominal_gpus: 2, borrowing_limit_gpus: 2}\n"


def test_finish_time_fairness_by_hand():
    # One node of 4 GPUs, two tenants of weight 1, one 4-GPU job of 100 s each at t = 0. FIFO runs
    # a1 from 0 to 100 and b1 from 100 to 200. Both tenants are active at t = 0, so each job's fair
    # part is 4 / 2 = 2 GPUs and alone there it takes 100 x 4 / 2 = 200 s:
    # rho(a1) = 100 / 200 = 0.5, rho(b1) = 200 / 200 = 1.0 (not above 1).
    tenants = parse_tenants(EQUAL)
    jobs = [job("a1", "a", 4), job("b1", "b", 4)]
    report = run(tenants, jobs, nodes=1, gpus=4)
    fair = fairness_report(report.records, jobs, tenants, 4, default_catalog(), samples=5)
    assert fair.rho == {"a1": 0.5, "b1": 1.0}
    assert (fair.worst_rho, fair.share_rho_above_1) == (1.0, 0.0)
    assert fair.times == (0.0, 50.0, 100.0, 150.0, 200.0)
    assert fair.shares == {"a": (1.0, 1.0, 0.0, 0.0, 0.0), "b": (0.0, 0.0, 1.0, 1.0, 0.0)}
    # deserved: each may hold 4 (nominal 2 + 2 borrowed); while both wait, half each; then b alone
    assert fair.deserved == {"a": (0.5, 0.5, 0.0, 0.0, 0.0), "b": (0.5, 0.5, 1.0, 1.0, 0.0)}
    a, b = fair.tenants
    assert (a.queue, a.avg_share, a.avg_deserved, a.avg_queue_s) == ("a", 1.0, 0.5, 0.0)
    assert (b.queue, b.avg_share, b.avg_deserved, b.avg_queue_s) == ("b", 0.5, 0.75, 100.0)


def test_weights_change_the_fair_part():
    # weights 3:1: a's part is 3 GPUs (alone 100 x 4/3 s), b's 1 GPU (alone 400 s)
    tenants = parse_tenants(EQUAL.replace("borrowing_limit_gpus: 2}\n  -", "borrowing_limit_gpus: 2, weight: 3}\n  -"))
    jobs = [job("a1", "a", 4), job("b1", "b", 4)]
    report = run(tenants, jobs, nodes=1, gpus=4)
    fair = fairness_report(report.records, jobs, tenants, 4, default_catalog(), samples=3)
    assert fair.rho == pytest.approx({"a1": 0.75, "b1": 0.5})


def test_water_filling_caps_by_demand():
    assert water_fill(8, {"a": 1, "b": 1, "c": 2}, {"a": 1, "b": 8, "c": 8}) == {"a": 1, "b": 7 / 3, "c": 14 / 3}
    assert water_fill(8, {"a": 1}, {"a": 0}) == {"a": 0.0}


def _view(running, queued, tenancy=None):  # type: ignore[no-untyped-def]
    view = ClusterView(100.0, uniform(1, 8), default_catalog(), (8,), tuple(queued), tuple(running), lambda *a: None)
    return view if tenancy is None else ClusterView(**{**{f: getattr(view, f) for f in view.__dataclass_fields__}, "tenancy": tenancy})


def _jv(job_id, queue, gpus, submit=0.0, running=False, remaining=100.0, attained=0.0):  # type: ignore[no-untyped-def]
    from deepshare.core.types import Placement

    return JobView(job_id, "m", gpus, submit, remaining, attained, "c", placement=Placement.of({0: gpus}) if running else None,
                   queue=queue)


def test_drf_fills_the_least_served_queue_first():
    running = [_jv("a0", "a", 4, running=True)]
    queued = [_jv("a1", "a", 1, 1.0), _jv("b1", "b", 2, 2.0), _jv("b2", "b", 2, 3.0), _jv("b3", "b", 2, 4.0)]
    view = _view(running, queued)
    order = sorted(queued, key=drf(view))
    # keys: a1 (4+1)/8, b1 2/8, b2 4/8, b3 6/8
    assert [j.job_id for j in order] == ["b1", "b2", "a1", "b3"]
    weighted = parse_tenants("queues:\n  - {name: a, nominal_gpus: 4, weight: 2}\n  - {name: b, nominal_gpus: 4}\n")
    order = sorted(queued, key=drf(_view(running, queued, weighted)))
    # a's keys halve: a1 5/16
    assert [j.job_id for j in order] == ["b1", "a1", "b2", "b3"]


def test_themis_puts_the_job_furthest_behind_first():
    # now 100; two tenants active: fair part 4 GPUs each
    queued = [_jv("new", "a", 1, 99.0), _jv("old", "b", 1, 0.0), _jv("wide", "a", 8, 50.0)]
    view = _view((), queued)
    keys = {j.job_id: themis(view)(j)[0] for j in queued}
    # rho = (now - submit + 100) / (100 x max(1, gpus / 4)): new 101/100, old 200/100, wide 150/200
    assert keys == pytest.approx({"new": -1.01, "old": -2.0, "wide": -0.75})


def test_fairness_orders_are_registered_with_every_placement():
    names = set(policy_names(heuristics_only=True))
    assert {"drf+packed", "drf+consolidated+preempt", "themis+packed+preempt", "themis+consolidated+backfill"} <= names
    report = run(EQUAL, [job("a1", "a", 2), job("b1", "b", 2, at=5.0)], policy="themis+packed+preempt", nodes=1, gpus=4)
    assert report.finished == 2
    assert make_policy("drf+packed").name == "drf+packed"


def test_simulate_prints_and_writes_fairness(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples,queue,priority\n"
                     "a1,0,resnet50,4,100,,a,\nb1,0,resnet50,4,100,,b,\n")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(EQUAL)
    out = tmp_path / "r.json"
    rc, stdout, err = cli(capsys, "simulate", "--trace", trace, "--policy", "fifo+consolidated", "--tenants", tenants,
                          "--cluster", "a100-16", "--no-progress", "--json", out)
    assert rc == 0, err
    result = json.loads(out.read_text())
    assert [t["queue"] for t in result["fairness"]["tenants"]] == ["a", "b"]
    assert result["finished"] == 2


def test_simulate_names_the_field_of_a_bad_tenants_file(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\na1,0,resnet50,4,100,\n")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("queues: [{name: a, nominal_gpus: x}]\n")
    rc, _, err = cli(capsys, "simulate", "--trace", trace, "--policy", "fifo+consolidated", "--tenants", tenants, "--no-progress")
    assert rc == 2
    one_error_line(err, "tenants.yaml", "queues.0.nominal_gpus")


HASH_SEED_SCRIPT = r'''
from dataclasses import replace
from deepshare.core.contention import make_contention
from deepshare.core.metrics import JobRecord
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import JobSpec, Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.extra_features import _TenancyMemo
from deepshare.policies.step_state import StepState
from deepshare.tenants import Admitted, parse_tenants
from deepshare.tenants.fairness import fairness_report, water_fill

T = parse_tenants("queues:\n  - {name: a, nominal_gpus: 16, weight: 0.7}\n  - {name: b, nominal_gpus: 16, weight: 0.2}\n"
                  "  - {name: c, nominal_gpus: 16, weight: 0.1}\n")
topo = parse_topology("name: two\nnode_types:\n  g: {gpus: 8}\nnodes:\n  - {type: g, count: 2, prefix: n}\n")
running = [KnownJob("a1", "FSDP", 4, 0.0, 1000.0, placement=Placement(((1, 4),)), last_run_s=10.0, queue="a"),
           KnownJob("b1", "FSDP", 4, 0.0, 1000.0, placement=Placement(((1, 4),)), last_run_s=10.0, queue="b")]
queued = [KnownJob("y", "FSDP", 1, 100.0, 100.0, queue="c"), KnownJob("x", "FSDP", 8, 110.0, 10.0, queue="c")]
view = build_view(topo, default_catalog(), make_contention("profiled"), 200.0, [8, 0], queued, running, durations="exact")
print("themis", [l.job_id for l in Admitted(make_policy("themis+consolidated"), T).decide(view).launch])
specs = [JobSpec(q + "1", "FSDP", 8, 0.0, duration_s=100.0, queue=q) for q in "abc"]
records = [JobRecord(s.job_id, "FSDP", 8, 0.0, 0.0, 500.0, 800.0, 800.0, 1.0, 0, 0, False) for s in specs]
print("rho", repr(fairness_report(records, specs, T, 16, default_catalog(), samples=3).rho["c1"]))
state = StepState(replace(view, tenancy=T), view.free, ())
print("share", repr(_TenancyMemo(state).columns(state, view.queued[0])[2]))
print("fill", repr(water_fill(1.0, dict.fromkeys("abcd", 1.0), {"a": 0.1, "b": 0.2, "c": 0.23, "d": 5.0})["d"]))
'''


def test_sums_over_a_set_of_queues_do_not_depend_on_the_hash_seed():
    # Weights 0.7, 0.2, 0.1 add up to 1.0 in one order and to 0.9999999999999999 in another, and a
    # set of queue names is iterated in PYTHONHASHSEED's order: so themis' fair part, rho's G and
    # the tenant_weight_share column were summed, and water_fill's capacity reduced, in an order
    # that changed from one process to the next (seed 1: themis launched x, not y). Exactly rounded
    # sums (fsum) and the demands' own order make them one. By hand: themis' fair part of c is
    # 16 x 0.1 / 1 = 1.6 GPUs; x: rho = (90 + 10) / (10 x 8 / 1.6) = 2, y: (100 + 100) / 100 = 2; the
    # tie goes to the older, y (1 GPU), and x (8) no longer fits. c1's rho = 500 / (100 x 8 / 1.6) = 1;
    # c's weight share 0.1 / 1; water_fill: a, b and c are capped by their demands, d gets the rest.
    repo = Path(__file__).resolve().parents[2]
    outputs = []
    for seed in ("0", "1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.run([sys.executable, "-c", HASH_SEED_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0].splitlines() == ["themis ['y']", "rho 1.0", "share 0.1", f"fill {1.0 - 0.1 - 0.2 - 0.23!r}"]
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 1.0, 2.0, 5.0]),
                          st.one_of(st.none(), st.sampled_from([0.0, 1.0, 3.0, 7.0]))), max_size=25))
@settings(max_examples=300, deadline=None)
def test_the_active_queues_sweep_equals_scanning_every_record(rows):
    """Each finished job's fair share divides by the weights of the queues active at its
    submission; a sweep replaced a scan of every record per record (59 s for 32,000 jobs)."""
    from deepshare.core.metrics import JobRecord
    from deepshare.tenants.fairness import _active_weights

    kept = [JobRecord(f"j{i}", "FSDP", 1, submit, submit, None if extra is None else submit + extra, 1.0, 1.0, 1.0, 0, 0,
                      False) for i, (_, submit, extra) in enumerate(rows)]
    queue = {f"j{i}": f"q{q}" for i, (q, _, _) in enumerate(rows)}
    weight = {"q0": 1.0, "q1": 0.1, "q2": 0.7, "q3": 1e-9}
    swept = _active_weights(kept, queue, weight)
    for r in kept:
        if r.finish_s is None:
            assert r.job_id not in swept
            continue
        active = {queue[o.job_id] for o in kept if o.submit_s <= r.submit_s and (o.finish_s is None or o.finish_s > r.submit_s)}
        assert swept[r.job_id] == math.fsum(weight[q] for q in active | {queue[r.job_id]})
