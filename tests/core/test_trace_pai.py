"""The Alibaba PAI 2020 reader: task rows add up to jobs; features; skips; errors name line and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.traces import assign, detect_format, load, mix_preset
from deepshare.core.types import JobSpec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
HEADER = "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type"
JOINED = FIXTURES / "pai_joined.csv"


def models(n: int) -> list[str]:
    return assign(n, mix_preset("random"), np.random.default_rng(0))


def tasks(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "pai.csv"
    path.write_text("\n".join((header, *rows)) + "\n")
    return path


def test_joined_fixture() -> None:
    trace = load(JOINED)
    assert trace.format == "pai" and detect_format(JOINED) == "pai"
    m = models(4)  # kept jobs in order of first appearance: rows 2, 3-4, 5, 9
    same_user, same_group = "58540f191766", "fbeb14d671c629b6e82bee889fe4bb4c"
    assert trace.jobs == (
        JobSpec("4f057009a5d481acec67b088", m[0], 1, 0.0, duration_s=38.0, user=same_user, group=same_group),
        # plan_gpu 50 on one instance: half a GPU, rounded up
        JobSpec("a9449d475665e3bf0512520b", m[2], 1, 300.0, duration_s=1800.0, user="d2d3b77d342e"),
        # 2 instances x 400% = 8 GPUs; a failed job still ran for 900.5 s
        JobSpec(
            "74e1c8457b01c76b314b22bb", m[3], 8, 600.0, duration_s=900.5, user="c0a9b3e1f2d4",
            group="3c2d1a0b9e8f7d6c5b4a39281706f5e4",
        ),
        # a ps (no GPU) and 2 workers at 50%: 1 GPU, from the earliest start to the latest end
        JobSpec("af724763f4f5d0beef445849", m[1], 1, 890.0, duration_s=3000.0, user=same_user, group=same_group),
    )
    assert trace.skipped == (
        ("6884752e3565b15cafe14218", "line 6: CPU job (no GPU planned in any task)"),
        ("471dda9ed84965451e042145", "line 7: still running (task worker started but has no end time)"),
        ("82e5af3cd5c4af3f56c62c54", "line 8: never ran (no task with both a start and an end time)"),
    )


def test_task_table_alone_uses_first_task_start_as_submit() -> None:
    trace = load(FIXTURES / "pai_tasks.csv")
    m = models(2)
    assert trace.jobs == (
        JobSpec("4f057009a5d481acec67b088", m[0], 1, 0.0, duration_s=38.0),
        JobSpec("af724763f4f5d0beef445849", m[1], 1, 838.0, duration_s=3000.0),
    )
    assert [job for job, _ in trace.skipped] == ["6884752e3565b15cafe14218"]


@pytest.mark.parametrize(
    "rows, gpus",
    [
        (["j,w,3.0,T,10,20,0,0,33.333333,MISC"], 1),  # float noise of 100%
        (["j,w,1.0,T,10,20,0,0,150,MISC"], 2),
        (["j,w,1.0,T,10,20,0,0,25,MISC", "j,e,1.0,T,10,20,0,0,25,MISC"], 1),
        (["j,w,2.0,T,10,20,0,0,800,V100"], 16),
    ],
)
def test_gpus_are_the_total_share_rounded_up(tmp_path: Path, rows: list[str], gpus: int) -> None:
    assert load(tasks(tmp_path, *rows)).jobs[0].gpus == gpus


def test_other_skips(tmp_path: Path) -> None:
    trace = load(tasks(
        tmp_path,
        "back,w,1,T,100,50,0,0,100,MISC",
        "noinst,w,,T,10,20,0,0,100,MISC",
        "instant,w,1,T,10,10,0,0,100,MISC",
        "ok,w,1,T,10,20,0,0,100,MISC",
    ))
    assert [j.job_id for j in trace.jobs] == ["ok"]
    assert dict(trace.skipped) == {
        "back": "line 2: task w ends before it starts",
        "noinst": "line 3: task w has no instance count",
        "instant": "line 4: no run time",
    }


@pytest.mark.parametrize(
    "row, fragments",
    [
        ("j,w,abc,T,10,20,0,0,100,MISC", ["'inst_num'", "an integer >= 0", "'abc'"]),
        ("j,w,1,T,10,20,0,0,-50,MISC", ["'plan_gpu'", "non-negative number"]),
        ("j,w,1,T,soon,20,0,0,100,MISC", ["'start_time'", "'soon'"]),
        ("j,w,1,T,10,nan,0,0,100,MISC", ["'end_time'", "'nan'"]),
        (",w,1,T,10,20,0,0,100,MISC", ["'job_name'", "non-empty"]),
        ("j,w,1,T,10,20,0,0", ["expected 10 fields", "truncated"]),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path: Path, row: str, fragments: list[str]) -> None:
    path = tasks(tmp_path, "ok,w,1,T,10,20,0,0,100,MISC", row)
    with pytest.raises(DeepShareError) as info:
        load(path)
    for fragment in ("pai.csv line 3", *fragments):
        assert fragment in str(info.value), str(info.value)


def test_bad_joined_columns_name_line_and_field(tmp_path: Path) -> None:
    header = HEADER + ",user,start_time_j,group"
    path = tasks(tmp_path, "j,w,1,T,10,20,0,0,100,MISC,u,yesterday,g", header=header)
    with pytest.raises(DeepShareError, match=r"pai.csv line 2: field 'start_time_j': expected a non-negative number"):
        load(path)


def test_a_task_listed_twice_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    path = tasks(tmp_path, "j,w,1,T,10,20,0,0,100,MISC", "k,w,1,T,10,20,0,0,100,MISC", "j,w,1,T,10,20,0,0,100,MISC")
    with pytest.raises(DeepShareError, match=r"line 4: task 'w' of job 'j' appears twice \(first at line 2\)"):
        load(path)


def test_missing_column_is_named(tmp_path: Path) -> None:
    path = tasks(tmp_path, "j,1,10,20,100", header="job_name,inst_num,start_time,end_time,plan_gpu")
    assert load(path).jobs[0].gpus == 1  # task_name is optional
    path = tasks(tmp_path, "j,1,10,20", header="job_name,inst_num,plan_gpu,start_time")
    with pytest.raises(DeepShareError, match="missing required column.*'end_time'.*pai"):
        load(path, format="pai")
