"""A ``+preempt`` policy behind admission stops only the jobs the tenants' rules let it stop."""

from __future__ import annotations

import pytest

from deepshare.core.contention import make_contention
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.tenants import Admitted, parse_tenants

TWO_NODES = parse_topology("""
name: two
node_types:
  g: {gpus: 8}
nodes:
  - {type: g, count: 2, prefix: n}
""")
PREEMPTIVE = ("srsf+consolidated+preempt", "srsf+topo-aware+preempt", "bsrsf+uncontended+preempt")


def view(tenants_yaml: str, running: list[KnownJob], queued: list[KnownJob]):  # type: ignore[no-untyped-def]
    tenants = parse_tenants(tenants_yaml)
    return tenants, build_view(TWO_NODES, default_catalog(), make_contention("profiled"), 100.0, [0, 0], queued, running)


def whole_cluster(job_id: str, queue: str, priority: str) -> KnownJob:
    return KnownJob(job_id, "FSDP", 16, 0.0, 10_000.0, placement=Placement(((0, 8), (1, 8))), last_run_s=10.0,
                    queue=queue, priority=priority)


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_another_queues_job_inside_its_quota_is_never_preempted(policy):
    # both queues may hold the whole cluster (nominal 16 each, standalone): b's job is inside its quota
    tenants, v = view("""
queues:
  - {name: team-a, nominal_gpus: 16}
  - {name: team-b, nominal_gpus: 16}
priority_classes: {low: 0, high: 100}
""", [whole_cluster("b-critical", "team-b", "high")], [KnownJob("a-low", "FSDP", 8, 1.0, 10.0, queue="team-a", priority="low")])
    if policy.startswith("srsf"):  # the order alone would stop it: the short job ranks first
        assert make_policy(policy).decide(v).preempt == ("b-critical",)
    decision = Admitted(make_policy(policy), tenants).decide(v)
    assert decision.preempt == () and decision.launch == ()


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_the_orders_own_preemption_stays_inside_a_queue(policy):
    # the quota admits the short job (24 > 16 + 8), the cluster is full: the order preempts inside the queue
    tenants, v = view("""
queues:
  - {name: team-a, nominal_gpus: 24}
""", [whole_cluster("a-long", "team-a", None)], [KnownJob("a-short", "FSDP", 8, 1.0, 10.0, queue="team-a")])
    decision = Admitted(make_policy(policy), tenants).decide(v)
    assert decision.preempt == ("a-long",) and [launch.job_id for launch in decision.launch] == ["a-short"]


def test_a_borrower_may_be_preempted_for_its_cohort():
    tenants, v = view("""
queues:
  - {name: team-a, cohort: main, nominal_gpus: 8}
  - {name: team-b, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 8}
""", [whole_cluster("b-borrowing", "team-b", None)], [KnownJob("a-short", "FSDP", 8, 1.0, 10.0, queue="team-a")])
    decision = Admitted(make_policy("srsf+consolidated+preempt"), tenants).decide(v)
    assert decision.preempt == ("b-borrowing",) and [launch.job_id for launch in decision.launch] == ["a-short"]
