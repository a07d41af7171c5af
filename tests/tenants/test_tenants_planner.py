"""The planner behind a tenants file: admission goes around each candidate (and each copy's
base), not around the planner, wherever a policy is put behind admission."""

from __future__ import annotations

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import WAIT, JobSpec
from deepshare.policies import make_policy
from deepshare.policies.planner import Planner, PlannerConfig
from deepshare.runtime.tenancy import LiveTenants, OneFilePerDecision, TenantsPolicy
from deepshare.tenants import Admitted, admit, admitted, parse_tenants

from tests.tenants.tenant_cases import TWO_TEAMS

CONFIG = PlannerConfig(candidates=("srsf+packed", "srsf+packed+preempt"), arrivals=False, contention="none")


def test_admission_goes_around_each_candidate_not_the_planner():
    tenants = parse_tenants(TWO_TEAMS)
    wrapped = admitted(Planner(CONFIG, make_policy), tenants, reclaim=False)
    assert isinstance(wrapped, Planner) and wrapped.config == CONFIG
    base = wrapped._make("srsf+packed")  # what every candidate and every copy's base is built with
    assert isinstance(base, Admitted) and base.tenants is tenants and not base.reclaim
    assert isinstance(admitted(make_policy("srsf+packed"), tenants), Admitted)  # any other policy: around it


def test_the_planner_behind_tenants_sees_held_jobs_and_rolls_out_admitted_copies():
    # One 8-GPU node; queue a may hold 12 GPUs, b 4, neither borrows. a1 and a2 fill the node;
    # b1 (t=0.5) is admitted but cannot preempt another queue's jobs; a3 (t=1, short) is
    # admitted and contested: wait, or preempt within its own queue; a5 (t=1.5, 8 GPUs) is held
    # (a would hold 16). Around the planner, admission hid a5 from it until a5 was admitted.
    tenants = parse_tenants("""
queues:
  - {name: a, cohort: main, nominal_gpus: 12, borrowing_limit_gpus: 0}
  - {name: b, cohort: main, nominal_gpus: 4, borrowing_limit_gpus: 0}
""")
    jobs = [JobSpec("a1", "FSDP", 4, 0.0, duration_s=3000.0, queue="a"),
            JobSpec("a2", "FSDP", 4, 0.0, duration_s=2000.0, queue="a"),
            JobSpec("b1", "FSDP", 4, 0.5, duration_s=20.0, queue="b"),
            JobSpec("a3", "FSDP", 4, 1.0, duration_s=50.0, queue="a"),
            JobSpec("a5", "FSDP", 8, 1.5, duration_s=100.0, queue="a")]
    planner = admitted(Planner(CONFIG, make_policy), tenants)
    seen_while_held = []

    class Watched:
        name = "watched"

        def decide(self, view):  # type: ignore[no-untyped-def]
            held = {j.job_id for j in admit(view.queued, view.running, tenants).held}
            decision = planner.decide(view)
            seen_while_held.extend(job for job in held if job in planner.futures_model._seen)
            jobs_of = {j.job_id: j for j in (*view.queued, *view.running)}
            after = [j for j in view.running if j.job_id not in decision.preempt]
            after += [jobs_of[launch.job_id] for launch in decision.launch]
            for queue, most in (("a", 12), ("b", 4)):  # no decision puts a queue over its quota
                assert sum(j.gpus for j in after if j.queue == queue) <= most
            return decision

    report = Simulator(uniform(1, 8), jobs, make_contention("none")).run(Watched())
    assert report.finished == 5
    assert "a5" in seen_while_held
    assert planner.stats.contested >= 1 and planner.stats.rollouts >= 2  # admitted copies were rolled out


def test_the_live_scheduler_puts_its_tenants_around_the_candidates(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text(TWO_TEAMS)
    live = LiveTenants("admin-token-for-tests", path)
    pinning = live.policy(Planner(CONFIG, make_policy))
    assert isinstance(pinning, OneFilePerDecision) and pinning.live is live
    policy = pinning.inner
    assert isinstance(policy, Planner)
    candidate = policy._make("srsf+packed")
    assert isinstance(candidate, TenantsPolicy) and candidate.live is live  # re-reads the live file per decision
    assert isinstance(candidate.inner, type(make_policy("srsf+packed")))
    plain = live.policy(make_policy("srsf+packed")).inner
    assert isinstance(plain, TenantsPolicy) and not isinstance(plain.inner, TenantsPolicy)


def test_a_reload_during_a_decision_takes_effect_at_the_next(tmp_path, monkeypatch):
    # The API thread may swap the file while the loop decides. The planner's candidates and its
    # rollouts' base decisions each read the live file; they must all read the same one.
    path = tmp_path / "tenants.yaml"
    path.write_text(TWO_TEAMS)
    live = LiveTenants("admin-token-for-tests", path)
    first, other = live.current, parse_tenants(TWO_TEAMS)
    seen = []

    class Reloaded:
        """A candidate during whose decision a reload swaps the file in."""

        def decide(self, view):  # type: ignore[no-untyped-def]
            seen.append(live.in_force())
            live._swap(other)
            seen.append(live.in_force())
            return WAIT

    class Later:
        """A candidate asked after the reload, in the same decision."""

        def decide(self, view):  # type: ignore[no-untyped-def]
            seen.append(live.in_force())
            return WAIT

    class TwoCandidates:  # what the planner does: each candidate behind the live file
        def __init__(self) -> None:
            self.candidates = [Reloaded(), Later()]

        def around_candidates(self, wrap):  # type: ignore[no-untyped-def]
            self.candidates = [wrap(c) for c in self.candidates]
            return self

        def decide(self, view):  # type: ignore[no-untyped-def]
            for candidate in self.candidates:
                candidate.decide(view)
            return WAIT

    from deepshare.runtime import tenancy

    used = []  # the file each candidate's admission was built with
    monkeypatch.setattr(tenancy, "Admitted", lambda inner, tenants: used.append(tenants) or Admitted(inner, tenants))
    sim = Simulator(uniform(1, 8), [JobSpec("a1", "FSDP", 4, 0.0, duration_s=100.0, queue="a")], make_contention("none"))
    view = sim.advance()
    live.policy(TwoCandidates()).decide(view)
    assert len(used) == 2 and all(t is first for t in used)  # the second candidate too, after the reload
    assert len(seen) == 3 and all(t is first for t in seen)
    assert live.in_force() is other  # the next decision uses the new file
    used.clear()
    live.policy(Later()).decide(view)
    assert used == [other]


def test_a_nested_pin_keeps_the_outer_file(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text(TWO_TEAMS)
    live = LiveTenants("admin-token-for-tests", path)
    first, other = live.current, parse_tenants(TWO_TEAMS)
    with live.pinned():
        live._swap(other)
        with live.pinned():
            assert live.in_force() is first
        assert live.in_force() is first
    assert live.in_force() is other
