"""Million-job bookkeeping: the column report, the streamed --jobs-csv and the compact
utilisation timeline give exactly what the record-based code gave."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.contention import make_contention
from deepshare.core.jobs_csv import JobsCsvStream
from deepshare.core.metrics import JobRecord, ReportColumns, UtilTimeline, build_report, report_from_columns
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec
from deepshare.policies import make_policy


def record_based_report(records, total_gpus, busy_gpu_s):
    """The metrics as the record-based build_report computed them (before the columns)."""
    finished = [r for r in records if r.finish_s is not None]
    jcts = [r.jct_s for r in finished]
    admitted = [r for r in records if not r.rejected]
    makespan = max(r.finish_s for r in finished) - min(r.submit_s for r in admitted) if finished else 0.0
    mean = lambda v: float(np.mean(v)) if len(v) else None  # noqa: E731
    pct = lambda v, q: float(np.percentile(v, q)) if len(v) else None  # noqa: E731
    return {
        "jobs": len(records),
        "finished": len(finished),
        "rejected": sum(r.rejected for r in records),
        "avg_jct_s": mean(jcts),
        "p50_jct_s": pct(jcts, 50),
        "p95_jct_s": pct(jcts, 95),
        "p99_jct_s": pct(jcts, 99),
        "avg_queue_s": mean([r.queue_s for r in finished]),
        "makespan_s": makespan,
        "gpu_util": busy_gpu_s / (total_gpus * makespan) if makespan > 0 else 0.0,
        "useful_util": sum(r.useful_gpu_s for r in finished) / (total_gpus * makespan) if makespan > 0 else 0.0,
        "avg_slowdown": mean([1.0 / r.mean_ratio for r in finished]),
        "preemptions": sum(r.preemptions for r in records),
        "migrations": sum(r.migrations for r in records),
        "avg_service_jct_s": mean([r.service_jct_s for r in finished]),
    }


@st.composite
def records(draw):
    out = []
    for i in range(draw(st.integers(0, 30))):
        gpus = draw(st.sampled_from([1, 2, 3, 8]))
        submit = draw(st.floats(0, 1e6))
        kind = draw(st.sampled_from(["done", "done", "rejected", "unfinished"]))
        if kind == "done":
            start = submit + draw(st.floats(0, 1e5))
            finish = start + draw(st.floats(1e-3, 1e5))
            held = draw(st.floats(0, finish - submit)) * gpus
            out.append(JobRecord(f"j{i}", "m", gpus, submit, start, finish, held, draw(st.floats(0, 1e5)),
                                 draw(st.floats(0.35, 1.0)), draw(st.integers(0, 3)), draw(st.integers(0, 3)), False))
        elif kind == "rejected":
            out.append(JobRecord(f"j{i}", "m", gpus, submit, None, None, 0.0, 0.0, 1.0, 0, 0, True))
        else:
            out.append(JobRecord(f"j{i}", "m", gpus, submit, None, None, 0.0, 0.0, 1.0, draw(st.integers(0, 2)), 0, False))
    return out


@settings(max_examples=200, deadline=None)
@given(recs=records(), busy=st.floats(0, 1e9))
def test_column_report_equals_the_record_based_one_exactly(recs, busy):
    got = build_report(recs, total_gpus=64, busy_gpu_s=busy).to_dict()
    want = record_based_report(recs, 64, busy)
    assert {k: got[k] for k in want} == want
    assert report_from_columns(ReportColumns.of(recs), total_gpus=64, busy_gpu_s=busy).to_dict() == got


def test_column_report_tiny_case_exact_numbers():
    recs = [
        JobRecord("a", "m", 2, 0.0, 10.0, 110.0, 200.0, 100.0, 0.5, 1, 0, False),
        JobRecord("b", "m", 4, 5.0, 5.0, 25.0, 80.0, 20.0, 1.0, 0, 2, False),
        JobRecord("c", "m", 64, 1.0, None, None, 0.0, 0.0, 1.0, 0, 0, True),
    ]
    r = build_report(recs, total_gpus=8, busy_gpu_s=280.0)
    assert (r.jobs, r.finished, r.rejected) == (3, 2, 1)
    assert r.avg_jct_s == 65.0  # (110 + 20) / 2
    assert r.avg_queue_s == 5.0  # a: 110 - 200/2 = 10; b: 20 - 80/4 = 0
    assert r.makespan_s == 110.0  # 110 - min admitted submit 0
    assert r.gpu_util == 280.0 / 880.0
    assert r.useful_util == (2 * 100 * 0.5 + 4 * 20 * 1.0) / 880.0
    assert r.avg_slowdown == 1.5 and r.avg_service_jct_s == 60.0
    assert (r.preemptions, r.migrations) == (1, 2)


def sim_jobs(n: int = 60) -> list[JobSpec]:
    models = ["resnet50", "vgg16", "bert", "gpt2"]
    return [
        JobSpec(f"j{i:03d}", models[i % 4], [1, 2, 4, 8, 64][i % 5], float(i * 40), duration_s=100.0 + (i * 97) % 900)
        for i in range(n)
    ]


def test_streamed_jobs_csv_is_byte_identical_and_in_trace_order(tmp_path):
    jobs = sim_jobs()
    kept = Simulator(uniform(2, 8), jobs, make_contention("profiled")).run(make_policy("srtf+spread"))
    path = tmp_path / "jobs.csv"
    with JobsCsvStream(path) as out:
        seen = []

        def add(index, record):
            seen.append(index)
            out.add(index, record)

        light = Simulator(uniform(2, 8), jobs, make_contention("profiled"), keep_records=False, on_record=add)
        report = light.run(make_policy("srtf+spread"))
        assert not path.exists()  # written beside it, renamed at the end
    assert seen != sorted(seen)  # jobs finished out of trace order: the buffer reordered them
    assert sorted(seen) == list(range(len(jobs)))
    assert path.read_text() == kept.jobs_csv()
    assert report.records == () and report.to_dict() == kept.to_dict()
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.csv"]


def test_streamed_csv_replaces_atomically_and_a_failed_run_leaves_the_old_file(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    with pytest.raises(RuntimeError):
        with JobsCsvStream(path) as out:
            out.add(0, JobRecord("a", "m", 1, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0, 0, False))
            raise RuntimeError("the simulation failed")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.csv"]
    with JobsCsvStream(path) as out:
        out.add(1, JobRecord("b", "m", 2, 1.0, None, None, 0.0, 0.0, 1.0, 0, 0, True))
        assert out.held == 1
        out.add(0, JobRecord("a", "m", 1, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0, 0, False))
        assert out.held == 0
    lines = path.read_text().splitlines()
    assert lines[0].startswith("job_id,model,gpus,submit_s")
    assert lines[1] == "a,m,1,0.0,0.0,1.0,1.0,1.0,1.0,0,0,False,1.0,0.0,1.0"
    assert lines[2] == "b,m,2,1.0,,,0.0,0.0,1.0,0,0,True,,,"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the replaced file's mode is kept


def test_streamed_csv_into_a_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(DeepShareError, match=r"nope/jobs.csv: cannot write per-job table"):
        JobsCsvStream(tmp_path / "nope" / "jobs.csv")


def test_only_jobs_in_the_system_keep_simulator_state():
    jobs = sim_jobs(40)
    sim = Simulator(uniform(2, 8), jobs, make_contention("none"), config=SimConfig(round_s=300.0))
    policy = make_policy("fifo+consolidated")
    retired = []
    while (view := sim.advance()) is not None:
        sim.apply(policy.decide(view))
        mid = sim.report("x")  # mid-run report: unfinished jobs counted, nothing changed
        assert mid.jobs == 40 and len(mid.records) == 40
        assert len(sim._jobs) == len(sim._running) + sim.queue_length  # only jobs in the system keep state
        retired.append(mid.finished + mid.rejected)
    assert sim._jobs == {} and 0 < retired[len(retired) // 2] < 40
    assert sim.report("x").finished == 32 and sim.report("x").rejected == 8


def test_util_timeline_reads_like_the_list_of_tuples():
    tl = UtilTimeline()
    for t, busy in [(0.0, 4), (1.0, 4), (1.0, 6), (2.5, 0), (3.0, 0), (3.0, 2)]:
        tl.record(t, busy)
    assert list(tl) == [(0.0, 4), (1.0, 6), (2.5, 0), (3.0, 2)]
    assert tl == [(0.0, 4), (1.0, 6), (2.5, 0), (3.0, 2)]
    assert tl[-1] == (3.0, 2) and tl[1:3] == [(1.0, 6), (2.5, 0)] and len(tl) == 4
    assert tuple(tl) == ((0.0, 4), (1.0, 6), (2.5, 0), (3.0, 2))
