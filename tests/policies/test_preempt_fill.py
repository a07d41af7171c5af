"""Preempt-or-fill (``ORDER+PLACEMENT+preempt+fill``): the preemptive decision when it preempts,
else the non-preemptive one. It is the rule the fabric imitation's hybrid turned out to be (issue
37: an exact imitation of ``srsf+topo-aware`` deferring to ``srsf+topo-aware+preempt``).

The hand-checked fabric: two leaves of two 4-GPU nodes (nodes 0-1 leaf l0, nodes 2-3 leaf l1).
"""

from __future__ import annotations

import pytest
from fabric_cases import two_leaves_of_two

from deepshare.core.contention import make_contention
from deepshare.core.fabric import TopologyRequest
from deepshare.core.simulator import Simulator
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import uniform
from deepshare.core.traces.generator import generate
from deepshare.core.types import Decision, JobSpec, Launch, Placement, WAIT
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy, policy_info, policy_names
from deepshare.policies.registry import BACKFILL_PLACEMENTS

TWO_LEAVES = two_leaves_of_two(4)
CATALOG = default_catalog()


def fragmented_view():
    """Two short 2-GPU jobs hold a node of each leaf; an 8-GPU gang that requires one leaf and a long
    6-GPU job wait. SRSF's top set is both running jobs and the gang (12 GPUs); the 6-GPU job is
    outside it. Neither leaf has 8 free GPUs, and the gang outranks no running job."""
    running = [KnownJob("r1", "FSDP", 2, 0.0, 100.0, placement=Placement(((0, 2),)), last_run_s=10.0),
               KnownJob("r2", "FSDP", 2, 0.0, 100.0, placement=Placement(((2, 2),)), last_run_s=10.0)]
    queued = [KnownJob("gang", "FSDP", 8, 0.0, 200.0, topology=TopologyRequest(required_level="leaf")),
              KnownJob("long", "FSDP", 6, 0.0, 1000.0)]
    return build_view(TWO_LEAVES, CATALOG, make_contention("none"), 10.0, [2, 4, 2, 4], queued, running)


def test_where_the_preemptive_rule_leaves_gpus_idle_fill_launches_what_fits():
    view = fragmented_view()
    assert make_policy("srsf+topo-bestfit+preempt").decide(view) == WAIT
    filled = make_policy("srsf+topo-bestfit+preempt+fill").decide(view)
    assert filled == make_policy("srsf+topo-bestfit").decide(view)
    assert filled.preempt == () and [launch.job_id for launch in filled.launch] == ["long"]
    assert filled.launch[0].placement.total_gpus == 6


LONG_THEN_SHORT = (JobSpec("long", "FSDP", 2, submit_time=0.0, duration_s=1000.0),
                   JobSpec("short", "FSDP", 2, submit_time=100.0, duration_s=100.0))


def test_where_the_preemptive_rule_preempts_fill_takes_that_decision_whole():
    sim = Simulator(uniform(1, 2), LONG_THEN_SHORT, make_contention("none"))
    sim.advance()
    sim.apply(Decision(launch=(Launch("long", Placement.of({0: 2})),)))
    view = sim.advance()
    decision = make_policy("srsf+consolidated+preempt+fill").decide(view)
    assert decision == make_policy("srsf+consolidated+preempt").decide(view)
    assert decision.preempt == ("long",) and decision.launch == (Launch("short", Placement.of({0: 2})),)


@pytest.mark.parametrize("placement", BACKFILL_PLACEMENTS)
def test_every_decision_of_a_gang_heavy_run_is_the_mux_of_the_two_rules(placement):
    """Driven by ``+preempt+fill`` over a generated gang-heavy trace, every decision equals the
    preemptive rule's when that preempts, else the non-preemptive rule's, and the run preempts."""
    trace = generate(40, load=1.5, total_gpus=TWO_LEAVES.total_gpus, demand={2: 2, 4: 2, 6: 1, 8: 2},
                     median_duration_s=600.0, duration_sigma=1.0, seed=3, required_level="leaf",
                     required_share=0.4)
    fill = make_policy(f"srsf+{placement}+preempt+fill")
    preemptive, greedy = make_policy(f"srsf+{placement}+preempt"), make_policy(f"srsf+{placement}")
    sim = Simulator(TWO_LEAVES, trace.jobs, make_contention("profiled"))
    decisions = filled = 0
    while (view := sim.advance()) is not None:
        decision = fill.decide(view)
        expected = preemptive.decide(view)
        if not expected.preempt:
            alone = expected
            expected = greedy.decide(view)
            filled += expected != alone
        assert decision == expected, view.now
        sim.apply(decision)
        decisions += 1
    report = sim.report()
    assert report.finished == len(trace.jobs) and report.preemptions > 0 and decisions > len(trace.jobs)
    assert filled > 0  # the run reached states where the two rules disagree without preempting


def test_registered_for_every_preemptive_order_on_the_backfill_placements():
    names = {n for n in policy_names(heuristics_only=True) if n.endswith("+preempt+fill")}
    preemptive = {n.removesuffix("+fill") for n in names}
    assert preemptive == {n for n in policy_names(heuristics_only=True)
                          if n.endswith("+preempt") and n.split("+")[1] in BACKFILL_PLACEMENTS}
    assert "srsf+topo-aware+preempt+fill" in names and "fifo+topo-aware+preempt+fill" not in names
    assert "preempt-or-fill" in policy_info("srsf+topo-aware+preempt+fill").description


def test_a_gang_no_domain_can_ever_hold_does_not_idle_the_cluster():
    # Two racks of 8 GPUs; "huge" needs 16 inside one rack (impossible), "small" 1. The
    # preemptive rule counted huge against the cluster's 16 GPUs, which left none for small: every
    # preemptive heuristic launched nothing on an idle cluster, at every request. A placement
    # request may hold such a job (the simulator rejects it on arrival).
    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.schemas import PlacementRequest

    request = PlacementRequest.model_validate({
        "now": 100, "nodes": [{"name": "a", "gpus": 8, "free_gpus": 8, "rack": "r1"},
                              {"name": "b", "gpus": 8, "free_gpus": 8, "rack": "r2"}],
        "pending": [{"job_id": "huge", "model": "FSDP", "gpus": 16, "remaining_s": 1, "required_level": "rack"},
                    {"job_id": "small", "model": "FSDP", "gpus": 1, "remaining_s": 10}]})
    preemptive = [name for name in policy_names(heuristics_only=True) if "+preempt" in name]
    assert len(preemptive) > 50
    for name in preemptive:
        answer = {d.job_id: d.action for d in PlacementEngine(EngineSettings(policy=name)).place(request).decisions}
        assert answer == {"huge": "wait", "small": "place"}, name
