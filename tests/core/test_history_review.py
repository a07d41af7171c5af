"""A review of what the simulator is told about the past, each case failing before its fix: ten
finished jobs of 1e-9 s with exact estimates set the estimates' bias to +13.8 (every later
estimate read as a million times too short, and the order of a queue flipped); ``--history``
naming the trace, or a copy of its jobs, told the policies each job's true run time under
``--durations unknown``; a history row in samples skipped the one-year bound the trace has."""

from __future__ import annotations

import math
import shutil

import pytest

from cli_run import cli, one_error_line

from deepshare.core.history import history_from_jobs
from deepshare.core.types import JobSpec

TRACE = ("job_id,submit_time,model,gpus,duration_s,total_samples,user,group,vc,requested_s\n"
         "B,1,MoE,8,100,,ub,gb,,\nL,10,MoE,8,20000,,ul,gl,,\nS,11,MoE,8,2000,,us,gs,,\n")


def test_exact_estimates_of_tiny_jobs_add_no_bias():
    jobs = [JobSpec(f"p{i}", "MoE", 1, submit_time=0.0, duration_s=1e-9, requested_s=1e-9) for i in range(10)]
    error = history_from_jobs(jobs).estimate_error()
    assert (error.jobs, error.bias, error.spread) == (10, 0.0, 0.0)


def test_an_estimate_past_a_year_is_read_as_the_posterior_reads_it():
    # second read: estimates of 3e9 s for runs of 3e7 s (under a year) learned a bias of -4.6 from the
    # raw estimate, which the posterior then applied to the estimate clamped to a year
    from deepshare.core.history import FinishedJob, JobHistory

    past = JobHistory([FinishedJob(f"p{i}", "MoE", 1, 3e7, 3e7 + i, None, None, None, 3e9) for i in range(10)])
    error = past.estimate_error()
    assert error.bias == pytest.approx(math.log(3e7 / 31_536_000))


def test_a_history_that_is_the_trace_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    shutil.copy(trace, tmp_path / "copy.csv")
    common = ("simulate", "--trace", trace, "--nodes", 1, "--policy", "qssf+packed", "--durations", "unknown")
    rc, _, err = cli(capsys, *common, "--history", trace)
    assert rc == 2
    one_error_line(err, f"--history {trace}: is the --trace")
    rc, _, err = cli(capsys, *common, "--history", tmp_path / "copy.csv")
    assert rc == 2
    one_error_line(err, "job 'B' is a job of the trace (same id, submit time, model, GPUs and work)")
    (tmp_path / "other.csv").write_text(TRACE.replace("MoE", "DLRM"))  # another seed's: the same ids, other models
    rc, _, err = cli(capsys, *common, "--history", tmp_path / "other.csv", "--no-progress")
    assert rc == 0, err
    (tmp_path / "past.csv").write_text(TRACE.replace("B,1,", "B,0,").replace("L,10,", "L,0,").replace("S,11,", "S,0,"))
    rc, _, err = cli(capsys, *common, "--history", tmp_path / "past.csv", "--no-progress")
    assert rc == 0, err  # the same ids, submitted at another time: other jobs


def test_a_history_row_in_samples_is_bounded_as_the_traces_are(tmp_path, capsys):
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "h.csv").write_text("job_id,submit_time,model,gpus,duration_s,total_samples\np1,0,DLRM,1,,1e18\n")
    rc, _, err = cli(capsys, "simulate", "--trace", tmp_path / "t.csv", "--nodes", 1, "--policy", "qssf+packed",
                     "--durations", "unknown", "--history", tmp_path / "h.csv")
    assert rc == 2
    one_error_line(err, f"--history {tmp_path / 'h.csv'}: job 'p1': field 'total_samples': expected at most a year")
