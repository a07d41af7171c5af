"""A preemptive heuristic does not stop a running job to give its GPUs to a queued job it outranks.

The preemptive rule counts the jobs that should run against the cluster's GPUs in rank order,
queued jobs that then cannot be placed included (a gang waiting for a domain, a shape ``packed``
waits for): a running job can fall outside that budget while a smaller queued job it outranks
fits, is placed on its GPUs and the running job is preempted for it. A victim whose GPUs are held
only by launches it outranks now keeps them; those launches are placed again where GPUs are free.

A gang's domain plan stops running jobs ranked below the gang; a job it would stop whose old GPUs,
once the gang is placed, only launches that job outranks hold keeps them too, unless the gang's
placement then no longer stands (under ``uncontended``: the gang would run below its ratio beside
it). Before, such a job was stopped (``two_leaf_view(1111)``, ``(886)``, ``(1396)``); under
``uncontended`` ``(551)`` and ``(1015)`` stop it for the gang's speed, as before.

Left, and not checked here: a later gang's plan may place that gang on GPUs an earlier plan's
victim ranked above it held, while its own stops free what that victim lacked
(``two_leaf_view(2009)`` except under ``packed``: gang0's plan stops m2 for one GPU on node 0, q1's
plan then stops m0, whose GPU on node 0 m2 could have had, and puts q1 on m2's GPU on node 2).
"""

from __future__ import annotations

import random

import pytest
from fabric_cases import two_leaves_of_two, two_leaves_spec

from deepshare.core.contention import make_contention
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.feasibility import check_view_decision
from deepshare.core.simulator import topology_refusal
from deepshare.core.snapshot import KnownJob, build_view
from deepshare.core.topology import parse_topology
from deepshare.core.types import Placement
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy

PREEMPTIVE = ["srsf+consolidated+preempt", "srsf+topo-bestfit+preempt", "srsf+topo-balanced+preempt",
              "srsf+topo-aware+preempt", "srsf+contention-aware+preempt", "srsf+uncontended+preempt",
              "srsf+packed+preempt", "las+topo-aware+preempt", "bsrsf+uncontended+preempt",
              "srsf+topo-bestfit+preempt+fill"]


def _running(name: str, gpus: int, remaining_s: float, alloc: tuple) -> KnownJob:
    return KnownJob(name, "FSDP", gpus, 0.0, remaining_s, placement=Placement(alloc), last_run_s=100.0)


def inversion_view():
    """Two leaves of two 4-GPU nodes. Running: h1 (node 0) and h2 (node 3), 1 GPU x 50 s each; m,
    7 GPUs x 1000 s (3 on node 1, 4 on node 2). Queued: a gang of 8 GPUs that requires a leaf
    (80 GPU-s: it ranks above m, and no leaf is free of h1 or h2, which outrank it), and low,
    4 GPUs x 2000 s (8000 GPU-s: m, at 7000, outranks it). Free: 3, 1, 0, 3."""
    running = [_running("h1", 1, 50.0, ((0, 1),)), _running("h2", 1, 50.0, ((3, 1),)),
               _running("m", 7, 1000.0, ((1, 3), (2, 4)))]
    queued = [KnownJob("gang", "FSDP", 8, 1.0, 10.0, topology=TopologyRequest(required_level="leaf")),
              KnownJob("low", "FSDP", 4, 1.0, 2000.0)]
    return build_view(two_leaves_of_two(4), default_catalog(), make_contention("profiled"), 5.0, [3, 1, 0, 3],
                      queued, running)


@pytest.mark.parametrize("policy", ["srsf+consolidated+preempt", "srsf+topo-bestfit+preempt", "srsf+topo-aware+preempt"])
def test_a_running_job_is_not_stopped_for_a_queued_job_it_outranks(policy):
    """The gang counts 8 GPUs against the 16 and cannot be placed; m (7) falls outside the budget,
    low (4) inside it. m was preempted and low placed on node 2, m's GPUs; now m runs on and low
    goes where GPUs are free (3 on node 0 and one more)."""
    view = inversion_view()
    decision = make_policy(policy).decide(view)
    check_view_decision(decision, view)
    assert decision.preempt == ()
    (launch,) = decision.launch
    assert launch.job_id == "low" and launch.placement.fits(list(view.free))  # on GPUs no job holds


def test_a_victim_that_a_higher_ranked_launch_needs_is_still_preempted():
    """The gang of tests/fabric_cases' gang case ranks above r2 and plans leaf l1: r2 is stopped."""
    jobs = [_running("r0", 4, 1.0, ((1, 4),)), _running("r2", 4, 100.0, ((2, 4),)), _running("r1", 4, 1000.0, ((0, 4),))]
    queued = [KnownJob("gang", "FSDP", 8, 1.0, 10.0, topology=TopologyRequest(required_level="leaf")),
              KnownJob("q", "FSDP", 4, 1.0, 300.0)]
    view = build_view(two_leaves_of_two(4), default_catalog(), make_contention("profiled"), 5.0, [0, 0, 0, 4], queued, jobs)
    for policy in ("srsf+consolidated+preempt", "srsf+topo-aware+preempt"):
        decision = make_policy(policy).decide(view)
        check_view_decision(decision, view)
        assert decision.preempt == ("r2",)
        assert [(l.job_id, l.placement.alloc) for l in decision.launch] == [("gang", ((2, 4), (3, 4)))]


def inversions(policy, view, decision) -> list[tuple[str, str]]:
    """(victim, launch) pairs where the victim would fit on the GPUs the decision leaves free plus
    those of the launches it outranks: it was stopped for jobs ranked below it. Under
    ``uncontended`` a victim whose running would put a launch it ranks below under the
    strategy's ratio is stopped for that launch's speed, not for the ones below it."""
    key = make_policy(policy).order(view)
    jobs = {job.job_id: job for job in (*view.running, *view.queued)}
    after = list(view.free)
    for job_id in decision.preempt:
        jobs[job_id].placement.release(after)
    for launch in decision.launch:
        launch.placement.take(after)
    found = []
    for job_id in decision.preempt:
        victim = jobs[job_id]
        trial = list(after)
        below = [l for l in decision.launch if key(jobs[l.job_id]) > key(victim)]
        for launch in below:
            launch.placement.release(trial)
        if below and victim.placement.fits(trial) and not _slows_a_launch_above(policy, view, decision, jobs, key, victim):
            found.append((job_id, below[0].job_id))
    return found


def _slows_a_launch_above(policy, view, decision, jobs, key, victim) -> bool:
    """Under ``uncontended``: whether, with ``victim`` running (the launches it outranks gone), a
    launch ranked above it is predicted below the strategy's ratio."""
    from deepshare.core.contention.base import leaving_out
    from deepshare.policies.placement import UNCONTENDED_MIN_RATIO

    if "uncontended" not in policy:
        return False
    stopped = [jobs[j] for j in decision.preempt if j != victim.job_id]
    above = [l for l in decision.launch if key(jobs[l.job_id]) < key(victim)]
    with leaving_out(view.predict, stopped) as predict:
        pending = []
        for launch in above:
            if predict(jobs[launch.job_id], launch.placement, pending).ratio < UNCONTENDED_MIN_RATIO:
                return True
            pending.append((jobs[launch.job_id], launch.placement))
    return False


MODELS = ["MobileNetV3", "GraphSage", "FSDP", "Transformer-XL", "DLRM", "MoE"]


def _spread_jobs(rng: random.Random, free: list[int], prefix: str, count: int, remaining: list[float]) -> list[KnownJob]:
    """Up to ``count`` running jobs ``<prefix><i>``, each on 1-3 random nodes with free GPUs (taken
    from ``free``), a random model, remaining time from ``remaining`` and attained service."""
    running = []
    for i in range(count):
        nodes = [n for n in range(len(free)) if free[n] > 0]
        if not nodes:
            break
        alloc = {}
        for n in rng.sample(nodes, min(len(nodes), rng.randint(1, 3))):
            alloc[n] = rng.randint(1, free[n])
            free[n] -= alloc[n]
        placement = Placement.of(alloc)
        running.append(KnownJob(f"{prefix}{i}", rng.choice(MODELS), placement.total_gpus, 0.0, rng.choice(remaining),
                                placement=placement, last_run_s=100.0, attained_gpu_s=rng.choice([0.0, 100.0, 5000.0])))
    return running


def random_view(seed: int):
    """A random fabric of 1-3 levels and nodes of 1-8 GPUs, up to 8 running jobs spread over 1-3
    nodes, up to 5 queued jobs (some with topology requests)."""
    rng = random.Random(seed)
    levels = ("l0", "l1", "l2")[:rng.randint(1, 3)]
    lines = ["name: rnd", "node_types:", *[f"  g{s}: {{gpus: {s}, nic_gbps: 100}}" for s in (1, 2, 4, 8)], "levels:",
             *[f"  - {{name: {level}, oversubscription: 2}}" for level in levels], "nodes:"]
    counter = [0]

    def walk(level: int, path: list[str]) -> None:
        counter[0] += 1
        if level < 0:
            domains = ", ".join(f"{levels[i]}: {path[len(levels) - 1 - i]}" for i in range(len(levels)))
            lines.append(f"  - {{type: g{rng.choice((1, 2, 4, 8))}, count: {rng.randint(1, 2)}, prefix: n{counter[0]}-, "
                         f"domains: {{{domains}}}}}")
            return
        for _ in range(rng.randint(1, 3)):
            walk(level - 1, path + [f"d{level}x{counter[0]}"])

    walk(len(levels) - 1, [])
    topology = parse_topology("\n".join(lines) + "\n")
    free = list(topology.capacity)
    running = _spread_jobs(rng, free, "r", rng.randint(0, 8), [10.0, 100.0, 1000.0, 10000.0])
    queued = []
    for i in range(rng.randint(0, 5)):
        gpus = rng.choice([1, 2, 4, 8, 12, 16])
        kind = rng.randint(0, 3)
        request = (NO_TOPOLOGY, TopologyRequest(required_level=rng.choice(levels)),
                   TopologyRequest(preferred_level=rng.choice(levels)),
                   TopologyRequest(slice_size=rng.choice([1, 2, 4]), slice_level=rng.choice(levels)))[kind]
        if (request.slice_size and gpus % request.slice_size) or gpus > sum(topology.capacity) \
                or topology_refusal(request, topology, gpus) is not None:
            continue
        queued.append(KnownJob(f"q{i}", rng.choice(MODELS), gpus, 1.0, rng.choice([10.0, 100.0, 1000.0, 10000.0]),
                               topology=request))
    return build_view(topology, default_catalog(), make_contention(rng.choice(["profiled", "link"])), 5.0, free,
                      queued, running)


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_no_random_decision_stops_a_job_for_jobs_it_outranks(policy):
    """Random fabrics and queues: every decision is feasible, and no victim would fit on the GPUs
    left free plus those of the launches it outranks. Of seeds 0-2999 the old rule gave such a
    decision at 1806 (srsf with consolidated, topo-bestfit, topo-balanced, topo-aware, packed),
    2095 (topo-aware) and 924, 1040, 2785, 2976 (packed); the new rule at none."""
    for seed in (924, 1040, 1806, 2095, 2785, 2976, *range(100)):
        view = random_view(seed)
        decision = make_policy(policy).decide(view)
        check_view_decision(decision, view)
        assert inversions(policy, view, decision) == [], seed


def two_leaf_view(seed: int):
    """A random cluster of 2-3 leaves of 2-3 nodes, a short blocker in most leaves, up to 4 jobs
    running across nodes, up to 2 leaf-bound gangs and up to 5 other queued jobs: where a launch
    giving way to a victim meets a gang's domain plan."""
    rng = random.Random(seed)
    leaves, per_leaf, gpus = rng.choice([(2, 2, 4), (2, 2, 8), (3, 2, 4), (2, 3, 4)])
    lines = ["name: t", "node_types:", f"  g: {{gpus: {gpus}, nic_gbps: 100}}", "levels:",
             "  - {name: leaf, oversubscription: 2}", "nodes:",
             *[f"  - {{type: g, count: {per_leaf}, prefix: l{leaf}n, domains: {{leaf: L{leaf}}}}}" for leaf in range(leaves)]]
    topology = parse_topology("\n".join(lines) + "\n")
    free = list(topology.capacity)
    running = []
    for leaf in range(leaves):
        if rng.random() < 0.8:
            node, count = leaf * per_leaf + rng.randrange(per_leaf), rng.randint(1, 2)
            free[node] -= count
            running.append(KnownJob(f"h{leaf}", rng.choice(MODELS), count, 0.0, rng.choice([5.0, 20.0]),
                                    placement=Placement(((node, count),)), last_run_s=100.0))
    running += _spread_jobs(rng, free, "m", rng.randint(1, 4), [100.0, 500.0, 1000.0, 3000.0])
    queued = [KnownJob(f"gang{i}", rng.choice(MODELS), rng.choice([per_leaf * gpus, per_leaf * gpus - 1, gpus + 1]), 1.0,
                       rng.choice([1.0, 10.0]), topology=TopologyRequest(required_level="leaf"))
              for i in range(rng.randint(0, 2))]
    for i in range(rng.randint(1, 5)):
        count = rng.choice([1, 2, 3, 4, 5, 6, 8])
        request = NO_TOPOLOGY if rng.random() < 0.7 or count > per_leaf * gpus else TopologyRequest(required_level="leaf")
        queued.append(KnownJob(f"q{i}", rng.choice(MODELS), count, rng.choice([1.0, 500.0, 2000.0]),
                               rng.choice([50.0, 200.0, 700.0, 1500.0, 4000.0]), topology=request))
    return build_view(topology, default_catalog(), make_contention(rng.choice(["profiled", "link"])), 1000.0, free,
                      queued, running)


@pytest.mark.parametrize("policy", ["srsf+topo-aware+preempt", "srsf+packed+preempt"])
def test_a_launch_placed_again_does_not_take_the_domain_a_higher_ranked_gang_frees(policy):
    """Seed 667: gang0 ranks first and its plan frees leaf B (stopping h1, m0, m1); q1, which
    gave way to m0, was placed again on node 2 of leaf B before the plan ran, so the gang got no
    plan and waited. Launches placed again now come after the gangs' plans."""
    view = two_leaf_view(667)
    decision = make_policy(policy).decide(view)
    check_view_decision(decision, view)
    assert ("gang0", ((2, 4), (3, 3))) in [(l.job_id, l.placement.alloc) for l in decision.launch]


def test_a_domain_plans_victim_keeps_its_gpus_when_only_a_launch_it_outranks_holds_them():
    """Seed 1111, leaves {0, 1} and {2, 3} of 8-GPU nodes, free 6, 5, 4, 8: gang0 (15 GPUs in a leaf)
    frees leaf {2, 3} by stopping h1 (1 GPU on node 2) and m0 (3 on node 1, 3 on node 2), while q1
    (1 GPU, ranked below h1) took node 2's free GPU in the first pass. Before, h1 was stopped for
    q1; now q1 gives way and goes to node 1 (m0's GPUs), and h1 keeps running."""
    view = two_leaf_view(1111)
    decision = make_policy("srsf+packed+preempt").decide(view)
    check_view_decision(decision, view)
    assert decision.preempt == ("m0",)
    assert [(l.job_id, l.placement.alloc) for l in decision.launch] == [
        ("q0", ((0, 6),)), ("gang0", ((2, 7), (3, 8))), ("q1", ((1, 1),))]


@pytest.mark.parametrize("policy", PREEMPTIVE)
def test_no_two_leaf_decision_stops_a_job_for_jobs_it_outranks(policy):
    """Seeds 551, 886, 1015, 1111 and 1396: a gang's domain plan stopped a job whose old GPUs
    only a launch it outranks held once the gang was placed (srsf with consolidated,
    contention-aware, uncontended and packed)."""
    for seed in (551, 886, 1015, 1111, 1396, *range(300)):
        view = two_leaf_view(seed)
        decision = make_policy(policy).decide(view)
        check_view_decision(decision, view)
        assert inversions(policy, view, decision) == [], seed


def test_launches_placed_again_see_the_decisions_other_launches():
    """``uncontended`` places a job only where it is predicted at 0.9 or more beside the launches
    already made: the launch that gives way to m (low) and is placed again must count k's too (it
    was placed as if no other launch were pending: 5 of these 200 decisions broke the rule)."""
    from itertools import product

    from deepshare.policies.placement import UNCONTENDED_MIN_RATIO

    broken = []
    names = ["FSDP", "DLRM", "MoE", "Transformer-XL", "GraphSage"]
    for contention, k_model, low_model, k_gpus, now in product(["profiled", "link"], names, names, [1, 2], [5.0, 1000.0]):
        running = [_running("h1", 1, 50.0, ((0, 1),)), _running("h2", 1, 50.0, ((3, 1),)),
                   _running("m", 7, 1000.0, ((1, 3), (2, 4)))]
        queued = [KnownJob("gang", "FSDP", 8, 1.0, 10.0, topology=TopologyRequest(required_level="leaf")),
                  KnownJob("low", low_model, 4, 1.0, 2000.0), KnownJob("k", k_model, k_gpus, 1.0, 9000.0)]
        view = build_view(two_leaves_of_two(4), default_catalog(), make_contention(contention), now, [3, 1, 0, 3],
                          queued, running)
        decision = make_policy("srsf+uncontended+preempt").decide(view)
        check_view_decision(decision, view)
        for job_id, beside, alone, first in launch_ratios(view, decision):
            if not first and beside < UNCONTENDED_MIN_RATIO <= alone:
                broken.append((contention, k_model, low_model, k_gpus, now, job_id))
    assert broken == []


def launch_ratios(view, decision) -> list[tuple[str, float, float, bool]]:
    """Each launch's predicted ratio with the decision's stops left out: beside the launches
    before it, and alone; and whether it is the first launch."""
    from deepshare.core.contention.base import leaving_out

    jobs = {job.job_id: job for job in (*view.running, *view.queued)}
    out = []
    with leaving_out(view.predict, [jobs[j] for j in decision.preempt]) as predict:
        pending = []
        for launch in decision.launch:
            job = jobs[launch.job_id]
            out.append((launch.job_id, predict(job, launch.placement, pending).ratio,
                        predict(job, launch.placement, ()).ratio, not pending))
            pending.append((job, launch.placement))
    return out


@pytest.mark.parametrize("policy", ["srsf+consolidated+preempt", "srsf+topo-aware+preempt", "srsf+topo-bestfit+preempt",
                                    "srsf+packed+preempt", "srsf+uncontended+preempt"])
def test_a_gang_that_gives_way_goes_where_it_fits_before_any_plan_stops_a_job(policy):
    """Three leaves of two 4-GPU nodes, a 1-GPU blocker in each. Two 8-GPU leaf gangs that cannot
    be placed take the budget, so V (6 GPUs on nodes 0-1) falls outside it; G, a 4-GPU leaf gang
    ranked below V, was placed on V's node 0 and gives way to V. Leaf L1 has 3 + 4 GPUs free: G
    goes there. A domain plan only frees domains a gang does not fit, so G went to a plan that
    stopped R (ranked below G) in leaf L2."""
    lines = ["name: t", "node_types:", "  g: {gpus: 4, nic_gbps: 100}", "levels:",
             "  - {name: leaf, oversubscription: 2}", "nodes:",
             *[f"  - {{type: g, count: 2, prefix: l{leaf}n, domains: {{leaf: L{leaf}}}}}" for leaf in range(3)]]
    leaf = TopologyRequest(required_level="leaf")
    running = [_running("B0", 1, 5.0, ((1, 1),)), _running("B1", 1, 5.0, ((2, 1),)), _running("B2", 1, 5.0, ((5, 1),)),
               _running("V", 6, 20.0, ((0, 4), (1, 2))), _running("R", 4, 1000.0, ((4, 4),))]
    queued = [KnownJob("H1", "FSDP", 8, 1.0, 10.0, topology=leaf), KnownJob("H2", "FSDP", 8, 1.0, 10.0, topology=leaf),
              KnownJob("G", "FSDP", 4, 1.0, 100.0, topology=leaf)]
    view = build_view(parse_topology("\n".join(lines) + "\n"), default_catalog(), make_contention("profiled"), 5.0,
                      [0, 1, 3, 4, 0, 3], queued, running)
    decision = make_policy(policy).decide(view)
    check_view_decision(decision, view)
    assert decision.preempt == ()
    (launch,) = decision.launch
    assert launch.job_id == "G" and {node for node, _ in launch.placement.alloc} <= {2, 3}


@pytest.mark.parametrize("seed, gang", [(551, "gang0"), (1015, "q0")])
def test_a_plans_victim_kept_running_never_slows_an_uncontended_gang_below_its_ratio(seed, gang):
    """The plan predicts the gang with every victim gone. Keeping a victim that then fits (551: h0
    beside gang0 on node 0; 1015: m0 beside q0 on node 1) put the gang at 0.845 and 0.462 of its
    isolated speed, under ``uncontended``'s 0.9; such a victim is now kept only if the gang's
    placement still stands with it running."""
    from deepshare.policies.placement import UNCONTENDED_MIN_RATIO

    view = two_leaf_view(seed)
    decision = make_policy("srsf+uncontended+preempt").decide(view)
    check_view_decision(decision, view)
    ratios = {job_id: beside for job_id, beside, _, _ in launch_ratios(view, decision)}
    assert gang in ratios and ratios[gang] >= UNCONTENDED_MIN_RATIO


def three_leaves_view():
    """Leaves of 2, 2 and 1 4-GPU nodes (nodes 0-1, 2-3, 4). Running: A (node 0, 4 GPUs), B (node 1,
    3), C (node 2, 3) and V (1 GPU each on nodes 1 and 3, ranked below the others by its attained
    service). Queued: S (1 GPU) and G, an 8-GPU gang that requires a leaf (no leaf can hold it:
    every job it could stop outranks it or is V). Free: 0, 0, 1, 3, 4."""
    topology = parse_topology("""
name: three-leaves
node_types:
  g: {gpus: 4, nic_gbps: 400}
levels:
  - {name: leaf}
  - {name: spine}
nodes:
  - {type: g, count: 2, prefix: a, domains: {leaf: L0, spine: s}}
  - {type: g, count: 2, prefix: b, domains: {leaf: L1, spine: s}}
  - {type: g, count: 1, prefix: c, domains: {leaf: L2, spine: s}}
""")

    def run(job_id: str, gpus: int, alloc: tuple, attained: float) -> KnownJob:
        return KnownJob(job_id, "FSDP", gpus, 0.0, 1000.0, attained_gpu_s=attained, placement=Placement(alloc),
                        last_run_s=100.0)

    running = [run("A", 4, ((0, 4),), 10.0), run("B", 3, ((1, 3),), 11.0), run("C", 3, ((2, 3),), 12.0),
               run("V", 2, ((1, 1), (3, 1)), 1000.0)]
    queued = [KnownJob("S", "FSDP", 1, 50.0, 1000.0),
              KnownJob("G", "FSDP", 8, 40.0, 1000.0, attained_gpu_s=20.0, topology=TopologyRequest(required_level="leaf"))]
    return build_view(topology, default_catalog(), make_contention("profiled"), 200.0, [0, 0, 1, 3, 4], queued, running)


@pytest.mark.parametrize("policy", ["las+topo-bestfit+preempt", "las+consolidated+preempt", "las+topo-aware+preempt+fill",
                                    "gittins+topo-balanced+preempt", "las+packed+preempt"])
def test_a_victim_no_launch_needs_keeps_running(policy):
    """G counts 8 GPUs in the budget and pushes V out of it; S was placed on the GPU V freed (best
    fit takes the single free GPU first), so V was stopped for a 1-GPU job with 8 idle GPUs to
    choose from, and 9 GPUs idled. V now keeps running and S goes where GPUs are free."""
    view = three_leaves_view()
    decision = make_policy(policy).decide(view)
    check_view_decision(decision, view)
    assert decision.preempt == ()
    (launch,) = decision.launch
    assert launch.job_id == "S" and launch.placement.fits(list(view.free))



UNCONTENDED_CASES = [(177, "las"), (407, "las"), (1647, "srsf"), (2062, "srsf"),  # a cancelled preemption
                     (29, "las"), (41, "las"), (321, "las"), (452, "las")]  # a job in slices
"""``random_view`` seeds (found by a search over 4,000) where an ``uncontended`` decision launched a
job below the placement's ratio: a victim whose old GPUs stayed free kept running beside a launch
placed without it (0.53, 0.72, 0.52, 0.72 of its isolated speed), or a job asking for slices was
laid out by the slice rule beside a running job (0.55, 0.45, 0.38, 0.54)."""


@pytest.mark.parametrize("seed, order", UNCONTENDED_CASES)
def test_no_uncontended_preemptive_decision_launches_below_the_ratio(seed, order):
    """``uncontended`` waits while a job would run below 0.9x its isolated speed; its preemptive
    decision keeps that promise: a victim stays stopped when running it would slow a launch below
    the ratio (cancelling a preemption, or the spare pass), and slices wait like any shape."""
    from deepshare.policies.placement import UNCONTENDED_MIN_RATIO

    view = random_view(seed)
    decision = make_policy(f"{order}+uncontended+preempt").decide(view)
    check_view_decision(decision, view)
    ratios = launch_ratios(view, decision)
    assert all(beside >= UNCONTENDED_MIN_RATIO for _, beside, _, _ in ratios), ratios


@pytest.mark.parametrize("seed, order", UNCONTENDED_CASES)
def test_the_ratio_is_the_placements_own_not_read_from_the_policys_name(seed, order):
    """A preemptive heuristic built by hand under any name with ``uncontended`` decides as the
    registry's, and one with its ratio changed keeps that ratio: the preemptive rule reads it from
    the placement (:func:`~deepshare.policies.place_types.waits_below`); it looked for
    "+uncontended" in the policy's name."""
    from deepshare.policies.fabric_place import with_topology
    from deepshare.policies.heuristic import HeuristicPolicy
    from deepshare.policies.heuristic_names import heuristic_orders
    from deepshare.policies.place_types import waits_below
    from deepshare.policies.placement import PLACEMENTS, consolidate, make_uncontended

    view = random_view(seed)
    rank = heuristic_orders()[order][0]
    mine = HeuristicPolicy("my-scheduler", rank, PLACEMENTS["uncontended"][0], preemptive=True)
    assert mine.decide(view) == make_policy(f"{order}+uncontended+preempt").decide(view)
    assert waits_below(PLACEMENTS["uncontended"][0]) == 0.9 and waits_below(PLACEMENTS["packed"][0]) is None
    strict = with_topology(make_uncontended(0.95), consolidate)
    assert waits_below(strict) == 0.95 and waits_below(make_uncontended(1)) == 1.0
    decision = HeuristicPolicy("strict", rank, strict, preemptive=True).decide(view)
    check_view_decision(decision, view)
    assert all(beside >= 0.95 for _, beside, _, _ in launch_ratios(view, decision))


@pytest.mark.parametrize("request_", [TopologyRequest(required_level="leaf", slice_size=2, slice_level="leaf"),
                                      TopologyRequest(preferred_level="leaf", slice_size=2, slice_level="leaf")])
def test_uncontended_slices_pass_over_a_slow_domain_to_one_at_speed(request_):
    """Two leaves of two 4-GPU nodes; DLRM jobs on 2 GPUs of nodes 0 and 1 (link contention). A
    4-GPU DLRM job in slices of 2 per leaf: leaf L0's layout (2 + 2 beside them) runs at 0.68,
    leaf L1's (node 2 alone) at 1.0. The ratio was checked once, after the least free leaf was
    chosen, and the job waited (second read); the slow layout is now passed over like a leaf
    that does not fit."""
    topology = parse_topology(two_leaves_spec("{gpus: 4, nic_gbps: 100}", "{name: leaf, oversubscription: 2}"))
    running = [KnownJob(f"r{n}", "DLRM", 2, 0.0, 1000.0, placement=Placement(((n, 2),)), last_run_s=100.0) for n in (0, 1)]
    view = build_view(topology, default_catalog(), make_contention("link"), 5.0, [2, 2, 4, 4],
                      [KnownJob("q", "DLRM", 4, 1.0, 100.0, topology=request_)], running)
    for policy in ("srsf+uncontended", "srsf+uncontended+preempt"):
        decision = make_policy(policy).decide(view)
        check_view_decision(decision, view)
        assert [(launch.job_id, launch.placement.alloc) for launch in decision.launch] == [("q", ((2, 4),))], policy
        assert decision.preempt == ()
