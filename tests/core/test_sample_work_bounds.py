"""rev12 #1 and #2: a job given in samples has a bounded isolated run time.

``total_samples`` is work at the catalog's reference throughput, so only the simulator (which
holds the catalog) can bound the run time it implies: 10^18 samples of DLRM on 8 GPUs is a
627,000-year run, and with ``--round-s 300`` the run never ended. A tiny positive count
(5e-324) loaded and then aborted the run at completion with an error naming no file or field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.bounds import MAX_DURATION_S
from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import SimConfig, Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy

HEADER = "job_id,submit_time,model,gpus,duration_s,total_samples"


def build(jobs: list[JobSpec], **config: float) -> Simulator:
    return Simulator(uniform(1, 8), jobs, make_contention("profiled"), config=SimConfig(**config))


def test_samples_past_a_year_of_run_time_are_refused_when_the_simulator_is_built() -> None:
    year_of_samples = MAX_DURATION_S * default_catalog().reference_throughput("DLRM", 8)
    with pytest.raises(DeepShareError) as info:
        build([JobSpec("ok", "DLRM", 8, 0.0, total_samples=1000.0), JobSpec("j1", "DLRM", 8, 0.0, total_samples=1e18)],
              round_s=300.0)
    message = str(info.value)
    assert message.startswith("job 'j1': field 'total_samples': ") and "a year" in message and "\n" not in message
    report = build([JobSpec("j1", "DLRM", 8, 0.0, total_samples=year_of_samples)]).run(make_policy("fifo+consolidated"))
    assert report.makespan_s == pytest.approx(MAX_DURATION_S)  # the bound itself is accepted


def test_simulate_refuses_the_huge_trace_in_one_line(capsys, tmp_path: Path) -> None:
    """Without rounds it reported a makespan of 1.98e13 s; with ``--round-s 300`` it ran for days."""
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\nj1,0,DLRM,8,,1e18\n")
    rc, _, err = cli(capsys, "simulate", "--trace", path, "--policy", "fifo+consolidated", "--nodes", 1,
                     "--gpus-per-node", 8)
    assert rc == 2
    one_error_line(err, "'j1'", "'total_samples'", "a year")


# -- rev12 #2: the least work ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, text, where, field",
    [
        ("t.csv", f"{HEADER}\nj1,0,FSDP,2,,5e-324\n", "t.csv line 2", "'total_samples'"),
        ("t.csv", f"{HEADER}\nj1,0,FSDP,2,1e-320,\n", "t.csv line 2", "'duration_s'"),
        ("t.csv", f"{HEADER}\nj1,0,FSDP,2,9e-13,\n", "t.csv line 2", "'duration_s'"),
        ("r.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n1,2,0,1,MoE,1e-13,0\n",
         "r.csv line 2", "'duration'"),
        ("a.json", '{"j1": {"model": "FSDP", "gpu_demand": 2, "total_samples_to_train": 1e-300}}', "a.json job 'j1'",
         "'total_samples_to_train'"),
    ],
)
def test_work_below_the_least_is_refused_where_the_trace_is_read(capsys, tmp_path: Path, name: str, text: str,
                                                                   where: str, field: str) -> None:
    """5e-324 samples loaded as 'a positive number' and the run then aborted at the job's
    completion: ``finished job 'j1': estimate_s must be a positive number of seconds, got 0.0``."""
    path = tmp_path / name
    path.write_text(text)
    for durations in ("exact", "estimated"):
        rc, _, err = cli(capsys, "simulate", "--trace", path, "--policy", "fifo+consolidated", "--nodes", 1,
                         "--durations", durations)
        assert rc == 2
        one_error_line(err, where, field, "from 1e-")


def test_the_least_work_itself_is_read(tmp_path: Path) -> None:
    from deepshare.core.traces import load

    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\na,0,FSDP,2,1e-12,\nb,0,FSDP,2,,1e-18\n")
    assert [(j.duration_s, j.total_samples) for j in load(path).jobs] == [(1e-12, None), (None, 1e-18)]


def test_samples_below_a_picosecond_of_run_time_are_refused_when_the_simulator_is_built() -> None:
    with pytest.raises(DeepShareError) as info:
        build([JobSpec("j1", "GraphSage", 8, 0.0, total_samples=1e-12)])
    assert str(info.value).startswith("job 'j1': field 'total_samples': expected at least 1e-12 s")


def test_an_estimate_is_never_0() -> None:
    from deepshare.core.bounds import MIN_WORK_S
    from deepshare.core.information import estimate_of

    job = JobSpec("j1", "FSDP", 2, 0.0, duration_s=5e-324)
    assert estimate_of(job, 5e-324, 0.5) == MIN_WORK_S  # the product underflows to 0.0
    assert estimate_of(job, 100.0, 0.5) == 50.0
