"""Trace rows at the edges (review of 2026-12-07): run times below the picosecond every reader
skips, blank PAI task names, a Philly file that is an object, and a skipped job's id printed
escaped."""

from __future__ import annotations

import pytest
from cli_run import cli

from deepshare.core.errors import DeepShareError
from deepshare.core.traces import pai, philly, slurm

SLURM_HEADER = "JobID|Submit|Elapsed|AllocTRES|State\n"
PAI_HEADER = "job_name,task_name,inst_num,plan_gpu,start_time,end_time\n"


def test_slurm_skips_a_run_shorter_than_a_picosecond():
    trace = slurm.parse(SLURM_HEADER + "1|2024-01-05T10:11:12|00:00:00.0000000000001|gres/gpu=2|COMPLETED\n"
                        "2|2024-01-05T10:11:12|00:10:00|gres/gpu=2|COMPLETED\n", "s.txt")
    assert [job.job_id for job in trace.jobs] == ["2"]
    assert trace.skipped[0][0] == "1" and "less than 1e-12 s" in trace.skipped[0][1]


def test_pai_skips_a_run_shorter_than_a_picosecond():
    trace = pai.parse(PAI_HEADER + "j1,w,1,100,1,1.0000000000000002\nj2,w,1,100,1,100\n", "p.csv")
    assert [job.job_id for job in trace.jobs] == ["j2"]
    assert trace.skipped[0][0] == "j1" and "less than 1e-12 s" in trace.skipped[0][1]


def test_pai_blank_task_names_are_unnamed_tasks_not_duplicates():
    trace = pai.parse(PAI_HEADER + "j1,,1,100,1,50\nj1,,1,100,1,60\n", "p.csv")
    assert [job.job_id for job in trace.jobs] == ["j1"]
    with pytest.raises(DeepShareError, match="task 'w' of job 'j1' appears twice"):
        pai.parse(PAI_HEADER + "j1,w,1,100,1,50\nj1,w,1,100,1,60\n", "p.csv")


def test_a_philly_file_that_is_an_object_says_so():
    with pytest.raises(DeepShareError, match=r"expected a JSON list of jobs \(Philly format\), got a JSON object$"):
        philly.parse('{"a": {"model": "m"}}', "a.json")


def test_a_skipped_jobs_id_is_printed_escaped(capsys, tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("job_id,gpu_num,submit_time,duration,vc,user\nbad\x1b[2J\x1b]0;PWNED\x07,0,5,100,v,u\n"
                    "j2,2,5,100,v,u\n")
    rc, out, err = cli(capsys, "simulate", "--trace", path, "--policy", "las+consolidated", "--no-progress")
    assert rc == 0 and "\x1b" not in out + err and "first: bad\\x1b[2J" in err
