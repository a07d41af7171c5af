"""build_report on hand-made records."""

from __future__ import annotations

import csv
import io

import pytest

from deepshare.core.metrics import REPORT_KEYS, JobRecord, MetricsReport, build_report


def rec(job_id, submit, start, finish, gpus=2, gpu_time=None, productive=None, ratio=1.0, pre=0, mig=0, rejected=False):
    if gpu_time is None:
        gpu_time = 0.0 if finish is None or start is None else gpus * (finish - start)
    if productive is None:
        productive = 0.0 if finish is None or start is None else finish - start
    return JobRecord(job_id, "FSDP", gpus, submit, start, finish, gpu_time, productive, ratio, pre, mig, rejected)


RECORDS = (
    # id, submit, first start, finish; JCTs 10, 30, 40, 100
    rec("a", 0.0, 0.0, 10.0),
    rec("b", 0.0, 5.0, 30.0, gpus=4, ratio=0.5),
    rec("c", 10.0, 20.0, 50.0, gpu_time=2 * 20.0, productive=15.0, ratio=0.8, pre=2),  # held 20 of 40 s
    rec("d", 20.0, 60.0, 120.0, gpus=1, mig=1),
    rec("big", 0.0, None, None, gpus=64, rejected=True),
    rec("late", 5.0, None, None),  # admitted, never finished (a truncated run)
)


def report() -> MetricsReport:
    return build_report(RECORDS, total_gpus=8, busy_gpu_s=480.0, policy="p", decisions=7, events=11)


def test_counts_and_jct_stats():
    r = report()
    assert r.policy == "p" and r.decisions == 7 and r.events == 11
    assert r.jobs == 6
    assert r.finished == 4
    assert r.rejected == 1
    jcts = [10.0, 30.0, 40.0, 100.0]
    assert [x.jct_s for x in RECORDS[:4]] == jcts
    assert r.avg_jct_s == pytest.approx(45.0)
    # linear interpolation between order statistics: rank q/100 * (n - 1)
    assert r.p50_jct_s == pytest.approx(35.0)  # rank 1.5
    assert r.p95_jct_s == pytest.approx(40.0 + 0.85 * 60.0)  # rank 2.85
    assert r.p99_jct_s == pytest.approx(40.0 + 0.97 * 60.0)  # rank 2.97
    assert r.records == RECORDS


def test_queueing_is_jct_minus_held_time():
    a, b, c, d = RECORDS[:4]
    assert a.queue_s == 0.0
    assert b.queue_s == pytest.approx(5.0)
    assert c.queue_s == pytest.approx(40.0 - 20.0)  # waited 10 before its start and 10 preempted
    assert d.queue_s == pytest.approx(40.0)
    assert report().avg_queue_s == pytest.approx((0 + 5 + 20 + 40) / 4)
    # never negative, even if held time exceeds the JCT by rounding
    odd = rec("odd", 0.0, 0.0, 10.0, gpu_time=2 * 10.0 + 1e-9)
    assert odd.queue_s == 0.0


def test_service_makespan_util_slowdown_counts():
    r = report()
    assert r.avg_service_jct_s == pytest.approx((10 + 25 + 30 + 60) / 4)
    assert r.makespan_s == pytest.approx(120.0)  # last finish - first admitted submission
    assert r.gpu_util == pytest.approx(480.0 / (8 * 120.0))
    assert r.avg_slowdown == pytest.approx((1 + 2 + 1.25 + 1) / 4)
    assert r.preemptions == 2
    assert r.migrations == 1


def test_makespan_ignores_rejected_submissions():
    records = (
        rec("big", 0.0, None, None, gpus=64, rejected=True),
        rec("a", 50.0, 50.0, 80.0),
    )
    r = build_report(records, total_gpus=4, busy_gpu_s=60.0)
    assert r.makespan_s == pytest.approx(30.0)
    assert r.gpu_util == pytest.approx(60.0 / (4 * 30.0))


def test_unfinished_record_properties():
    late = RECORDS[5]
    assert late.jct_s is None and late.queue_s is None and late.service_jct_s is None


def test_empty_report():
    r = build_report((), total_gpus=8, busy_gpu_s=0.0)
    assert r.jobs == r.finished == r.rejected == 0
    for key in ("avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "avg_slowdown", "avg_service_jct_s"):
        assert getattr(r, key) is None, key
    assert r.makespan_s == 0.0
    assert r.gpu_util == 0.0
    # only rejected jobs: nothing finished either
    r = build_report((rec("big", 0.0, None, None, rejected=True),), total_gpus=8, busy_gpu_s=0.0)
    assert r.finished == 0 and r.rejected == 1 and r.avg_jct_s is None and r.makespan_s == 0.0


def test_single_record_percentiles():
    r = build_report((rec("a", 1.0, 2.0, 8.0),), total_gpus=2, busy_gpu_s=12.0)
    assert r.avg_jct_s == r.p50_jct_s == r.p95_jct_s == r.p99_jct_s == pytest.approx(7.0)


def test_to_dict_has_every_scalar_and_no_records():
    d = report().to_dict()
    assert "records" not in d
    assert set(REPORT_KEYS) <= set(d)
    assert d["avg_jct_s"] == pytest.approx(45.0)
    assert d["policy"] == "p"
    assert all(not isinstance(v, (list, tuple, dict)) for v in d.values())


def test_jobs_csv():
    text = report().jobs_csv()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [
        "job_id", "model", "gpus", "submit_s", "first_start_s", "finish_s", "gpu_time_s", "productive_s",
        "mean_ratio", "preemptions", "migrations", "rejected", "jct_s", "queue_s", "service_jct_s",
    ]
    assert len(rows) == 1 + len(RECORDS)
    by_id = {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}
    assert [row[0] for row in rows[1:]] == [r.job_id for r in RECORDS]
    c = by_id["c"]
    assert float(c["jct_s"]) == 40.0
    assert float(c["queue_s"]) == 20.0
    assert float(c["service_jct_s"]) == 30.0
    assert c["preemptions"] == "2"
    assert c["rejected"] == "False"
    big = by_id["big"]
    assert big["rejected"] == "True"
    assert big["finish_s"] == big["first_start_s"] == big["jct_s"] == big["queue_s"] == big["service_jct_s"] == ""
    assert text.endswith("\n") and "\r" not in text
    assert build_report((), total_gpus=1, busy_gpu_s=0.0).jobs_csv() == ",".join(rows[0]) + "\n"


def test_useful_util_counts_work_at_isolated_speed():
    # a: 2 GPUs x 10 s x 1.0, b: 4 x 25 x 0.5, c: 2 x 15 x 0.8, d: 1 x 60 x 1.0 (unfinished: nothing)
    r = report()
    assert [x.useful_gpu_s for x in RECORDS[:4]] == pytest.approx([20.0, 50.0, 24.0, 60.0])
    assert r.useful_util == pytest.approx(154.0 / (8 * 120.0))
    assert r.useful_util < r.gpu_util
    assert "useful_util" in REPORT_KEYS and r.to_dict()["useful_util"] == r.useful_util
    assert build_report((), total_gpus=8, busy_gpu_s=0.0).useful_util == 0.0


def test_useful_util_discounts_contention_in_a_simulation():
    from deepshare.core.contention import make_contention
    from deepshare.core.simulator import Simulator
    from deepshare.core.topology import uniform
    from deepshare.core.types import JobSpec
    from deepshare.policies import make_policy

    # two heavy 2-GPU jobs on one 4-GPU node slow each other down: they hold the node longer
    # than their work needs. Useful work is still 2 x 2 GPUs x 100 s at isolated speed.
    jobs = [JobSpec(f"m{i}", "MoE", 2, 0.0, duration_s=100.0) for i in range(2)]
    model = make_contention("profiled", single_node_contention_free=False)
    r = Simulator(uniform(1, 4), jobs, model).run(make_policy("fifo+consolidated"))
    assert r.avg_slowdown > 1.1
    assert r.gpu_util == pytest.approx(1.0)
    assert r.useful_util == pytest.approx(400.0 / (4 * r.makespan_s))
    assert r.useful_util == pytest.approx(1.0 / r.avg_slowdown)
    alone = Simulator(uniform(1, 4), jobs, make_contention("none")).run(make_policy("fifo+consolidated"))
    assert alone.useful_util == pytest.approx(alone.gpu_util) == pytest.approx(1.0)
