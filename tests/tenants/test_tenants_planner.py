"""The planner behind a tenants file: admission goes around each candidate (and each copy's
base), not around the planner, wherever a policy is put behind admission."""

from __future__ import annotations

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.policies import make_policy
from deepshare.policies.planner import Planner, PlannerConfig
from deepshare.runtime.tenancy import LiveTenants, TenantsPolicy
from deepshare.tenants import Admitted, admitted, parse_tenants

from tests.tenants.tenant_cases import TWO_TEAMS

CONFIG = PlannerConfig(candidates=("srsf+packed", "srsf+packed+preempt"), arrivals=False, contention="none")


def test_admission_goes_around_each_candidate_not_the_planner():
    tenants = parse_tenants(TWO_TEAMS)
    wrapped = admitted(Planner(CONFIG, make_policy), tenants, restore_s=12.0)
    assert isinstance(wrapped, Planner) and wrapped.config == CONFIG
    base = wrapped._make("srsf+packed")  # what every candidate and every copy's base is built with
    assert isinstance(base, Admitted) and base.tenants is tenants and base.restore_s == 12.0
    assert isinstance(admitted(make_policy("srsf+packed"), tenants), Admitted)  # any other policy: around it


def test_the_registered_planner_behind_tenants_sees_held_jobs_and_keeps_the_quotas():
    # queue a may hold 4 GPUs and borrow up to 4 of b's; a submits 12 GPUs of work, b arrives later
    tenants = parse_tenants(TWO_TEAMS)
    jobs = [JobSpec("a1", "FSDP", 4, 0.0, duration_s=300.0, queue="a"),
            JobSpec("a2", "FSDP", 4, 0.0, duration_s=200.0, queue="a"),
            JobSpec("a3", "FSDP", 4, 1.0, duration_s=50.0, queue="a"),
            JobSpec("b1", "FSDP", 4, 5.0, duration_s=20.0, queue="b")]
    planner = admitted(make_policy("planner=2::none:end"), tenants)
    decisions = []

    class Watched:
        name = "watched"

        def decide(self, view):  # type: ignore[no-untyped-def]
            decision = planner.decide(view)
            decisions.append((view, decision))
            return decision

    report = Simulator(uniform(1, 8), jobs, make_contention("none")).run(Watched())
    assert report.finished == 4
    assert set(planner.futures_model._seen) == {"a1", "a2", "a3", "b1"}  # a3 was held at t=1: seen all the same
    started = {r.job_id: r.first_start_s for r in report.records}
    assert started["b1"] == 5.0  # b1 reclaimed its nominal quota from a's borrowing at once
    for view, decision in decisions:  # after every decision, a borrows b's GPUs only while b leaves them idle
        jobs_of = {j.job_id: j for j in (*view.queued, *view.running)}
        after = [j for j in view.running if j.job_id not in decision.preempt]
        after += [jobs_of[launch.job_id] for launch in decision.launch]
        used = {q: sum(j.gpus for j in after if j.queue == q) for q in ("a", "b")}
        assert used["a"] <= 4 or used["b"] == 0


def test_the_live_scheduler_puts_its_tenants_around_the_candidates(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text(TWO_TEAMS)
    live = LiveTenants("admin-token-for-tests", path)
    policy = TenantsPolicy(Planner(CONFIG, make_policy), live)
    assert policy.around and isinstance(policy.inner, Planner)
    candidate = policy.inner._make("srsf+packed")
    assert isinstance(candidate, TenantsPolicy) and not candidate.around  # re-reads the live file per decision
    plain = TenantsPolicy(make_policy("srsf+packed"), live)
    assert not plain.around
