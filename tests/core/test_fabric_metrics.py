"""Fabric and gang metrics (issue 36): fragmentation, cross-domain shares, large gangs' queueing,
and the ``--jobs-csv`` placement / ``domains_<level>`` columns, on hand-checked tiny runs.

Every run here uses a fake model whose isolated throughput is proportional to its GPU count and
independent of its node count, and ``none`` contention: a job runs exactly its ``duration_s``
wherever it is placed, so every number below is computed by hand.
"""

from __future__ import annotations

import csv
import io

import pytest
from rich.console import Console

from deepshare.core.contention import make_contention
from deepshare.core.fabric import TopologyRequest
from deepshare.core.jobs_csv import JobsCsvStream
from deepshare.core.metrics import CSV_COLUMNS, LARGE_GANG_GPUS, MetricsReport, build_report, csv_columns
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import load_topology, parse_topology, uniform
from deepshare.core.traces import generate, mix_preset
from deepshare.core.types import Decision, JobSpec, Launch, Migrate, Placement
from deepshare.core.view import ClusterView
from deepshare.core.workloads import Catalog, ProfileKey
from deepshare.experiments.report_format import comparison_table, report_table
from deepshare.experiments.scenario import Scenario, simulate
from deepshare.policies import make_policy

A2 = ProfileKey("A", 2, 2)

TWO_LEAVES = """
name: two-leaves
node_types:
  t: {gpus: 4}
levels:
  - {name: leaf}
  - {name: spine}
nodes:
  - {type: t, count: 2, prefix: a, domains: {leaf: leaf0, spine: spine0}}
  - {type: t, count: 2, prefix: b, domains: {leaf: leaf1, spine: spine0}}
"""
"""4 nodes x 4 GPUs: a0, a1 under leaf0 and b0, b1 under leaf1, one spine (node indices 0-3)."""


def catalog() -> Catalog:
    """Model A: 5 samples/s per GPU on any placement (so every job runs its duration_s exactly)."""
    return Catalog({A2: 10.0}, {(A2, A2): 1.0})


def job(job_id: str, gpus: int, submit: float, duration: float, **kw: object) -> JobSpec:
    return JobSpec(job_id, "A", gpus, submit, duration_s=duration, **kw)  # type: ignore[arg-type]


def P(**counts: int) -> Placement:
    """P(n0=4, n1=2) -> Placement.of({0: 4, 1: 2})."""
    return Placement.of({int(k[1:]): v for k, v in counts.items()})


class Script:
    """Launches each queued job on its planned placement as soon as those GPUs are free (plan order)."""

    name = "script"

    def __init__(self, plan: dict[str, Placement]) -> None:
        self.plan = plan

    def decide(self, view: ClusterView) -> Decision:
        free, queued = list(view.free), {j.job_id for j in view.queued}
        launch = []
        for job_id, placement in self.plan.items():
            if job_id in queued and placement.fits(free):
                placement.take(free)
                launch.append(Launch(job_id, placement))
        return Decision(launch=tuple(launch))


def two_leaves():
    return parse_topology(TWO_LEAVES)


def run(topology, jobs, plan, config=SimConfig()) -> MetricsReport:
    sim = Simulator(topology, jobs, make_contention("none"), catalog=catalog(), config=config)
    return sim.run(Script(plan))


def rows(report: MetricsReport) -> dict[str, dict[str, str]]:
    table = list(csv.reader(io.StringIO(report.jobs_csv())))
    return {row[0]: dict(zip(table[0], row)) for row in table[1:]}


def printed(report: MetricsReport) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(report_table(report, "t"))
    return console.export_text()


# -- the hand-checked fabric run ------------------------------------------------------------
#
# t=0:    A (4 GPUs, 100 s) on a0, B (4 GPUs, 300 s) on b0. C (6 GPUs, required leaf) waits: the
#         8 free GPUs (a1, b1) hold it by count but lie in two leaves. Smallest waiting = 6 <= 8.
# t=100:  A ends; C starts on a0 + a1 (one leaf). Nothing waits.
# t=150:  C ends; D (16 GPUs) arrives and waits: 12 free < 16, not fragmentation.
# t=300:  B ends; D starts on all four nodes (two leaves, one spine); it ends at 400.
# fragmentation = 6 GPUs x 100 s = 600 GPU-s; capacity 16 GPUs x makespan 400 s = 6,400.
# GPU-seconds held: A 400 + B 1,200 + C 300 + D 1,600 = 3,500; spanning two leaves: D's 1,600.

FABRIC_JOBS = (
    job("A", 4, 0.0, 100.0),
    job("B", 4, 0.0, 300.0),
    job("C", 6, 0.0, 50.0, topology=TopologyRequest(required_level="leaf")),
    job("D", 16, 150.0, 100.0),
)
FABRIC_PLAN = {"A": P(n0=4), "B": P(n2=4), "C": P(n0=4, n1=2), "D": P(n0=4, n1=4, n2=4, n3=4)}


@pytest.fixture(scope="module")
def fabric_report() -> MetricsReport:
    return run(two_leaves(), FABRIC_JOBS, FABRIC_PLAN)


def test_fragmentation_by_hand(fabric_report: MetricsReport) -> None:
    r = fabric_report
    assert r.makespan_s == 400.0
    assert r.fragmentation_gpu_s == 600.0
    assert r.fragmentation_share == 600.0 / (16 * 400.0)


def test_cross_domain_share_by_hand(fabric_report: MetricsReport) -> None:
    assert fabric_report.cross_domain_share == (("leaf", 1600.0 / 3500.0), ("spine", 0.0))
    assert fabric_report.gpu_util == 3500.0 / (16 * 400.0)
    doc = fabric_report.to_dict()
    assert doc["cross_domain_share_leaf"] == 1600.0 / 3500.0 and doc["cross_domain_share_spine"] == 0.0
    assert "cross_domain_share" not in doc
    assert all(not isinstance(v, (list, tuple, dict)) for v in doc.values())


def test_no_large_gangs_here(fabric_report: MetricsReport) -> None:
    r = fabric_report
    assert (r.large_gang_jobs, r.large_gang_avg_queue_s, r.large_gang_p95_queue_s) == (0, None, None)
    assert r.avg_queue_s == (0 + 0 + 100 + 150) / 4


def test_jobs_csv_placement_and_domain_columns(fabric_report: MetricsReport) -> None:
    header = fabric_report.jobs_csv().splitlines()[0].split(",")
    assert header == [*CSV_COLUMNS, "placement", "domains_leaf", "domains_spine"]
    by_id = rows(fabric_report)
    assert [(by_id[j]["placement"], by_id[j]["domains_leaf"], by_id[j]["domains_spine"]) for j in "ABCD"] == [
        ("a0", "1", "1"), ("b0", "1", "1"), ("a0;a1", "1", "1"), ("a0;a1;b0;b1", "2", "1"),
    ]
    assert by_id["C"]["first_start_s"] == "100.0" and by_id["C"]["queue_s"] == "100.0"


def test_printed_table_shows_the_fabric_rows(fabric_report: MetricsReport) -> None:
    text = printed(fabric_report)
    assert "fragmentation" in text and "600 (0.094)" in text
    assert "GPU-time share spanning > 1 leaf domain" in text and "0.457" in text
    assert "GPU-time share spanning > 1 spine domain" in text
    assert f">= {LARGE_GANG_GPUS} GPUs" not in text  # no large gang finished


def test_a_job_that_never_ran_has_empty_placement_columns() -> None:
    # E asks more than a leaf holds inside one leaf: rejected on arrival, never runs.
    jobs = (job("A", 4, 0.0, 10.0), job("E", 12, 0.0, 10.0, topology=TopologyRequest(required_level="leaf")))
    r = run(two_leaves(), jobs, {"A": P(n1=4)})
    assert r.rejected == 1
    assert rows(r)["E"]["placement"] == rows(r)["E"]["domains_leaf"] == rows(r)["E"]["domains_spine"] == ""
    assert rows(r)["A"]["placement"] == "a1"


# -- the last run's placement, migrations and mid-run reports -------------------------------


class MigrateAt10:
    """X (8 GPUs) starts on a0 + b0 (two leaves); when Y arrives at t=10, X moves to a0 + a1 (one
    leaf) and Y starts on b0."""

    name = "migrate"

    def decide(self, view: ClusterView) -> Decision:
        if view.now == 0.0:
            return Decision(launch=(Launch("X", P(n0=4, n2=4)),))
        return Decision(migrate=(Migrate("X", P(n0=4, n1=4)),), launch=(Launch("Y", P(n2=4)),))


def test_migration_counts_each_run_and_the_csv_shows_the_last() -> None:
    jobs = (job("X", 8, 0.0, 100.0), job("Y", 4, 10.0, 10.0))
    sim = Simulator(two_leaves(), jobs, make_contention("none"), catalog=catalog(),
                    config=SimConfig(migrate_overhead_s=0.0))
    policy = MigrateAt10()
    sim.apply(policy.decide(sim.advance()))  # t=0
    view = sim.advance()  # t=10: Y arrived; X has run 10 s across two leaves
    mid = sim.report()
    assert mid.cross_domain_share == (("leaf", 1.0), ("spine", 0.0))  # 80 of 80 GPU-s
    assert rows(mid)["X"]["placement"] == "a0;b0" and rows(mid)["X"]["domains_leaf"] == "2"
    assert rows(mid)["Y"]["placement"] == ""
    sim.apply(policy.decide(view))
    while (view := sim.advance()) is not None:
        sim.apply(Decision())
    r = sim.report("migrate")
    assert r.migrations == 1 and r.makespan_s == 100.0
    # X: 8 GPUs x 10 s across leaves, then 8 x 90 s in leaf0; Y: 4 x 10 s on b0.
    assert r.cross_domain_share == (("leaf", 80.0 / 840.0), ("spine", 0.0))
    assert r.fragmentation_gpu_s == 0.0
    assert (rows(r)["X"]["placement"], rows(r)["X"]["domains_leaf"]) == ("a0;a1", "1")


# -- large gangs on a flat cluster ----------------------------------------------------------
#
# 16 x 8 GPUs, one rack. S (8 GPUs, 100 s) on node 8; L1 (64 GPUs) starts at 0 on nodes 0-7;
# L2 (64 GPUs) waits for nodes 8-15 until S ends at 100. Large gangs' queueing: 0 and 100:
# mean 50, p95 0 + 0.95 x 100 = 95. Fragmentation: 0-50, 128 - 72 = 56 GPUs free < 64, none;
# 50-100 (L1 done), 120 free >= 64 while L2 waits for its nodes: 64 x 50 = 3,200 GPU-s.

LARGE_JOBS = (job("S", 8, 0.0, 100.0), job("L1", 64, 0.0, 50.0), job("L2", 64, 0.0, 50.0))
LARGE_PLAN = {"S": P(n8=8), "L1": Placement.of({n: 8 for n in range(8)}), "L2": Placement.of({n: 8 for n in range(8, 16)})}


def test_large_gangs_queueing_by_hand() -> None:
    r = run(uniform(16, 8), LARGE_JOBS, LARGE_PLAN)
    assert r.large_gang_jobs == 2
    assert r.large_gang_avg_queue_s == 50.0
    assert r.large_gang_p95_queue_s == pytest.approx(95.0, abs=1e-12)
    assert r.avg_queue_s == pytest.approx(100.0 / 3)
    assert r.makespan_s == 150.0
    assert r.fragmentation_gpu_s == 3200.0
    assert r.fragmentation_share == 3200.0 / (128 * 150.0)
    assert r.cross_domain_share == (("rack", 0.0),)
    text = printed(r)
    assert f"jobs >= {LARGE_GANG_GPUS} GPUs: avg / p95 queueing (s)" in text and "50 / 95 (2 jobs)" in text
    assert "fragmentation" not in text and "spanning" not in text  # one level: no fabric rows
    # a flat cluster's CSV has exactly the columns it always had
    assert r.jobs_csv().splitlines()[0].split(",") == CSV_COLUMNS


def test_fragmentation_counts_the_smallest_fitting_waiter_on_a_flat_cluster() -> None:
    # 2 x 4 GPUs. A (2 GPUs, 100 s) on n0. W (4 GPUs) must go to n0 (the script says so) and
    # waits 100 s with 6 GPUs free: 4 x 100 = 400 GPU-s. V (8 GPUs) waits too but never fits by
    # count while A runs; it runs after W (4 x 50 s) from t=150 to 160 on both nodes.
    jobs = (job("A", 2, 0.0, 100.0), job("W", 4, 0.0, 50.0), job("V", 8, 0.0, 10.0))
    r = run(uniform(2, 4), jobs, {"A": P(n0=2), "W": P(n0=4), "V": P(n0=4, n1=4)})
    assert r.makespan_s == 160.0
    # 0-100: smallest waiting W (4) <= 6 free; 100-150: V (8) waits with 4 free: nothing.
    assert r.fragmentation_gpu_s == 400.0
    assert r.fragmentation_share == 400.0 / (8 * 160.0)
    assert r.cross_domain_share == (("rack", 0.0),)  # both nodes are in rack0


# -- streams, flat-cluster compatibility, larger runs ---------------------------------------


def test_streamed_csv_matches_the_report_on_a_fabric_preset(tmp_path) -> None:
    topo = load_topology("h100-leafspine-2to1")
    jobs = generate(120, load=0.9, total_gpus=topo.total_gpus, demand={16: 4, 32: 3, 64: 2, 128: 1},
                    mix=mix_preset("random"), duration_sigma=1.0, seed=4, required_level="leaf",
                    required_share=0.5).jobs
    scenario = Scenario(topo, jobs)
    kept, _ = simulate(scenario, "fifo+consolidated")
    streamed, _ = simulate(scenario, "fifo+consolidated", jobs_csv=tmp_path / "j.csv")
    assert (tmp_path / "j.csv").read_text() == kept.jobs_csv()
    assert kept.to_dict() == streamed.to_dict()
    header = kept.jobs_csv().splitlines()[0].split(",")
    assert header[-3:] == ["placement", "domains_leaf", "domains_spine"]
    assert kept.large_gang_jobs == sum(1 for j in jobs if j.gpus >= LARGE_GANG_GPUS) - kept.rejected
    assert 0.0 <= kept.cross_domain_share[1][1] <= kept.cross_domain_share[0][1] <= 1.0


def test_fragmentation_matches_a_brute_force_integral() -> None:
    """The simulator's O(1)-per-event fragmentation equals integrating, decision by decision,
    the smallest queued job's GPUs while it fits in the free GPUs by count."""
    topo = load_topology("h100-leafspine-2to1")
    jobs = generate(200, load=1.2, total_gpus=topo.total_gpus, demand={8: 3, 16: 4, 32: 3, 64: 2, 128: 1},
                    mix=mix_preset("random"), duration_sigma=1.0, seed=5, required_level="leaf",
                    required_share=0.6).jobs
    gpus = {j.job_id: j.gpus for j in jobs}
    sim = Simulator(topo, jobs, make_contention("profiled"))
    policy = make_policy("fifo+consolidated")
    area, since, smallest = 0.0, 0.0, None
    view = sim.advance()
    while view is not None:
        if smallest is not None:
            area += smallest * (view.now - since)
        decision = policy.decide(view)
        launched = {launch.job_id for launch in decision.launch}
        waiting = [gpus[j.job_id] for j in view.queued if j.job_id not in launched]
        sim.apply(decision)
        since = view.now
        smallest = min(waiting) if waiting and min(waiting) <= sum(sim.free) else None
        view = sim.advance()
    assert smallest is None  # the last decision left nothing queued
    r = sim.report()
    assert area > 0 and r.fragmentation_gpu_s == pytest.approx(area, rel=1e-12)


def test_flat_reports_have_no_new_columns_or_rows() -> None:
    r = build_report((), total_gpus=8, busy_gpu_s=0.0)
    assert r.cross_domain_share == () and r.levels == ()
    assert csv_columns(()) == csv_columns(("rack",)) == CSV_COLUMNS
    assert csv_columns(("leaf", "spine"))[len(CSV_COLUMNS):] == ["placement", "domains_leaf", "domains_spine"]
    before = printed(r)
    for word in ("fragmentation", "spanning", "GPUs: avg / p95"):
        assert word not in before


def test_comparison_table_adds_columns_only_for_fabrics_and_large_gangs(fabric_report: MetricsReport) -> None:
    flat = run(uniform(2, 4), (job("A", 2, 0.0, 10.0),), {"A": P(n0=2)})

    def header(reports) -> str:
        console = Console(width=300, record=True, file=io.StringIO())
        console.print(comparison_table(reports, "t"))
        return console.export_text()

    assert "fragmentation" not in header([flat]) and "p95 queue >=" not in header([flat])
    assert "fragmentation" in header([fabric_report, flat])
    large = run(uniform(16, 8), LARGE_JOBS, LARGE_PLAN)
    assert f"p95 queue >= {LARGE_GANG_GPUS} GPUs" in header([large])


def test_stream_header_follows_the_levels(tmp_path) -> None:
    with JobsCsvStream(tmp_path / "flat.csv", levels=("rack",)):
        pass
    with JobsCsvStream(tmp_path / "fabric.csv", levels=("nvlink_domain", "leaf", "spine")):
        pass
    assert (tmp_path / "flat.csv").read_text() == ",".join(CSV_COLUMNS) + "\n"
    assert (tmp_path / "fabric.csv").read_text().rstrip("\n").split(",")[len(CSV_COLUMNS):] == [
        "placement", "domains_nvlink_domain", "domains_leaf", "domains_spine"]
