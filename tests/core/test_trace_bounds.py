"""Issue 35, item 4: trace readers and ``JobSpec`` refuse what DeepShare cannot represent.

Each observed bug has its exact input here: a refusal names the file's line and the field and
what was expected (:mod:`deepshare.core.bounds`), never a traceback, and nothing out of bounds
reaches the simulator. A property test fuzzes the numeric fields of a canonical row: whatever
a reader accepts lies within the bounds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli, one_error_line
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_SAMPLES, MAX_TIMESTAMP_S, gpus_ok
from deepshare.core.errors import DeepShareError
from deepshare.core.traces import canonical, generate, load, pai, parse_demand, slurm
from deepshare.core.traces.mixes import ModelMix
from deepshare.core.traces.recurrence import RecurrenceModel
from deepshare.core.traces.slurm import alloc_gpus, slurm_seconds
from deepshare.core.types import JobSpec

ROOT = Path(__file__).resolve().parents[2]
PAI_HEADER = "job_name,task_name,inst_num,plan_gpu,start_time,end_time"
SLURM_HEADER = "JobID|Submit|Start|End|Elapsed|Timelimit|AllocTRES|State"
SLURM_OK = "1|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|01:00:00|02:00:00|gres/gpu=2|COMPLETED"
CANONICAL_HEADER = "job_id,submit_time,model,gpus,duration_s,total_samples,requested_s"


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def refused(path: Path, *fragments: str) -> str:
    with pytest.raises(DeepShareError) as info:
        load(path)
    message = str(info.value)
    for fragment in (f"{path.name} line ", *fragments):
        assert fragment in message, message
    return message


def in_bounds(job: JobSpec) -> bool:
    return (
        gpus_ok(job.gpus)
        and 0 <= job.submit_time <= MAX_TIMESTAMP_S
        and (job.duration_s is None or 0 < job.duration_s <= MAX_DURATION_S)
        and (job.total_samples is None or 0 < job.total_samples <= MAX_SAMPLES)
        and (job.requested_s is None or 0 < job.requested_s <= MAX_DURATION_S)
    )


# -- the observed rows -------------------------------------------------------------------------
def test_pai_plan_gpu_1e308_is_refused_not_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "pai.csv", PAI_HEADER, "j1,t1,10,1e308,100,200")
    refused(path, "line 2", "'plan_gpu'", "up to 6,553,600", "'1e308'")


def test_pai_gpu_totals_past_the_bound_are_refused_at_the_row_that_passes_it(tmp_path: Path) -> None:
    refused(write(tmp_path, "pai.csv", PAI_HEADER, "j1,t1,1,1e20,100,200"), "line 2", "'plan_gpu'", "'1e20'")
    # each row within bounds, their sum not: 40,000 + 40,000 GPUs
    path = write(tmp_path, "sum.csv", PAI_HEADER, "j1,t1,5000,800,100,200", "j1,t2,5000,800,100,200")
    refused(path, "line 3", "'inst_num' and 'plan_gpu'", "job 'j1'", "at most 65,536 GPUs", "got 80000")
    # a float overflow of inst_num x plan_gpu is refused the same way
    path = write(tmp_path, "inf.csv", PAI_HEADER, "j1,t1,1e300,6553600,100,200")
    refused(path, "line 2", "'inst_num' and 'plan_gpu'")
    # exactly the bound is fine
    path = write(tmp_path, "max.csv", PAI_HEADER, "j1,t1,8192,800,100,200")
    assert load(path).jobs[0].gpus == MAX_JOB_GPUS


def test_pai_fractional_instance_counts_are_refused_but_fractional_percentages_are_not(tmp_path: Path) -> None:
    refused(write(tmp_path, "pai.csv", PAI_HEADER, "j1,t1,2.5,100,100,200"), "line 2", "'inst_num'", "'2.5'")
    # plan_gpu is percent of one GPU per instance: 8 x 12.5% is one GPU, 3 x 50% rounds up to 2
    path = write(tmp_path, "ok.csv", PAI_HEADER, "a,t1,8,12.5,100,200", "b,t1,3,50,100,200", "c,t1,2.0,400,100,200")
    assert [j.gpus for j in load(path).jobs] == [1, 2, 8]


def test_pai_times_and_run_times_are_bounded(tmp_path: Path) -> None:
    refused(write(tmp_path, "pai.csv", PAI_HEADER, "j1,t1,1,100,100,1e12"), "line 2", "'end_time'", "up to 1e+11")
    path = write(tmp_path, "long.csv", PAI_HEADER, "j1,t1,1,100,100,40000000")
    refused(path, "line 2", "job 'j1'", "run time", "'end_time'", "'start_time'", "31,536,000")


def test_slurm_gpu_counts_past_the_bound_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "slurm.txt", SLURM_HEADER, SLURM_OK.replace("gres/gpu=2", "gres/gpu=100000000000000000000"))
    refused(path, "line 2", "'AllocTRES'", "at most 65,536 GPUs")
    for tres in ("gres/gpu:a100=40000,gres/gpu:v100=40000", "gres/gpu=" + "9" * 5000, "gres/gpu=²"):
        with pytest.raises(DeepShareError, match="f line 2: field 'AllocTRES'"):
            alloc_gpus(tres, "f line 2")
    assert alloc_gpus("gres/gpu=65536", "f line 2") == MAX_JOB_GPUS


def test_slurm_elapsed_1_99_99_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "slurm.txt", SLURM_HEADER, SLURM_OK.replace("|01:00:00|", "|1:99:99|"))
    refused(path, "line 2", "'Elapsed'", "minutes and seconds 0-59", "'1:99:99'")


@pytest.mark.parametrize(
    "text",
    ["1:99:99", "00:60:00", "00:00:60", "1:60", "00:59:60.5", "1-24:00:00", "1-24", "1-00:60", "1-00:00:60",
     "366-00:00:00", "8760:00:01", "9" * 400, "9" * 400 + "-00", "1-1-1", "١:00"],
)
def test_slurm_times_out_of_range_are_refused(text: str) -> None:
    with pytest.raises(DeepShareError, match="f line 2: field 'Elapsed': expected a Slurm time"):
        slurm_seconds(text, "f line 2", "Elapsed")


@pytest.mark.parametrize(
    "text, seconds",
    [("59:59.999", 3599.999), ("00:03.271", 3.271), ("1-23:59:59", 172799), ("25:00:00", 90000), ("90", 5400),
     ("2-23", 255600), ("365-00:00:00", MAX_DURATION_S), ("8760:00:00", MAX_DURATION_S)],
)
def test_slurm_times_slurm_emits_are_read(text: str, seconds: float) -> None:
    assert slurm_seconds(text, "f line 2", "Elapsed") == pytest.approx(seconds)


def test_slurm_limits_and_run_times_past_a_year_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "limit.txt", SLURM_HEADER, SLURM_OK.replace("|02:00:00|", "|400-00:00:00|"))
    refused(path, "line 2", "'Timelimit'", "at most a year")
    no_elapsed = SLURM_OK.replace("|01:00:00|", "||").replace("2024-01-01T01:00:00", "2026-01-01T00:00:00")
    refused(write(tmp_path, "span.txt", SLURM_HEADER, no_elapsed), "line 2", "'Start' and 'End'", "31,536,000")


def test_canonical_gpus_1e20_is_refused_and_simulate_never_sees_it(capsys, tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", CANONICAL_HEADER, "a,0,resnet50,1e20,100,,")
    refused(path, "line 2", "'gpus'", "up to 65,536", "'1e20'")
    rc, _, err = cli(capsys, "simulate", "--trace", path, "--policy", "fifo+packed", "--nodes", 4)
    assert rc == 2
    one_error_line(err, "t.csv line 2", "'gpus'")
    rc, _, err = cli(capsys, "trace", "stats", path)
    assert rc == 2
    one_error_line(err, "t.csv line 2", "'gpus'")


@pytest.mark.parametrize(
    "row, field",
    [
        ("a,0,m,2,1e300,,", "'duration_s'"),
        ("a,0,m,2,31536001,,", "'duration_s'"),
        ("a,0,m,2,nan,,", "'duration_s'"),
        ("a,0,m,2,,1e19,", "'total_samples'"),
        ("a,0,m,2,,inf,", "'total_samples'"),
        ("a,1e12,m,2,100,,", "'submit_time'"),
        ("a,-inf,m,2,100,,", "'submit_time'"),
        ("a,0,m,2,100,,4e7", "'requested_s'"),
        ("a,0,m,2,100,,-1", "'requested_s'"),
        ("a,0,m,65537,100,,", "'gpus'"),
        ("a,0,m,2.5,100,,", "'gpus'"),
    ],
)
def test_canonical_values_out_of_bounds_are_refused(tmp_path: Path, row: str, field: str) -> None:
    refused(write(tmp_path, "t.csv", CANONICAL_HEADER, row), "line 2", field)


@pytest.mark.parametrize(
    "row, field",
    [
        ("a,0,m,1_000,100,,", "'gpus'"),
        ("a,0,m,2,1_0,,", "'duration_s'"),
        ("a,1_0,m,2,100,,", "'submit_time'"),
        ("a,0,m,2,,1_000,", "'total_samples'"),
        ("a,0,m,2,100,,1_0", "'requested_s'"),
        ("a,0,m,\u0662,100,,", "'gpus'"),  # ARABIC-INDIC DIGIT TWO: float() reads it as 2
        ("a,0,m,2,\uff11\uff10,,", "'duration_s'"),  # FULLWIDTH "10"
    ],
)
def test_numbers_are_ascii_digits_not_what_python_float_also_reads(tmp_path: Path, row: str, field: str) -> None:
    """rev12 #3: ``1_000`` loaded as 1000 GPUs and ``1_0`` as 10 s; a cell is a number only as
    any CSV tool reads it (an optional sign, ASCII digits, a point, an exponent)."""
    path = tmp_path / "t.csv"
    path.write_text(CANONICAL_HEADER + "\n" + row + "\n", encoding="utf-8")
    message = refused(path, "line 2", field)
    assert "\n" not in message


def test_numbers_in_every_written_form_still_read(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", CANONICAL_HEADER, "a,+0.,m,4.0,1e2,,", "b,.5,m,+2,,1E+3,", "c,1.5e-3,m,1,10.,,3600")
    jobs = {job.job_id: job for job in load(path).jobs}
    assert (jobs["a"].gpus, jobs["a"].duration_s, jobs["b"].submit_time, jobs["b"].total_samples) == (4, 100.0, 0.5, 1000.0)
    assert (jobs["c"].submit_time, jobs["c"].requested_s) == (1.5e-3, 3600.0)


def test_other_readers_refuse_through_the_shared_helpers_and_jobspec(tmp_path: Path) -> None:
    helios = write(tmp_path, "h.csv", "job_id,vc,gpu_num,submit_time,duration", "1,v,1e20,0,100")
    refused(helios, "line 2", "'gpu_num'")
    helios = write(tmp_path, "h2.csv", "job_id,vc,gpu_num,submit_time,duration", "1,v,2,0,1e300")
    refused(helios, "line 2", "'duration'", "31,536,000")  # the file's column, not JobSpec's field
    tiresias = write(
        tmp_path, "t.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval", "1,2,0,1,MoE,1e300,0"
    )
    refused(tiresias, "line 2", "'duration'", "31,536,000")


def test_trace_generate_refuses_demand_past_the_bound_or_the_cluster(capsys, tmp_path: Path) -> None:
    out = tmp_path / "g.csv"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 3, "--demand", "100000000000000000000:1", "--out", out)
    assert rc == 2 and not out.exists()
    one_error_line(err, "--demand", "65,536")
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 3, "--load", 0.5, "--nodes", 4, "--demand", "64:1",
                     "--out", out)
    assert rc == 2 and not out.exists()
    one_error_line(err, "--demand", "64 GPUs is more than the cluster's 32")
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 3, "--demand", "2:1e308,4:1e308", "--out", out)
    assert rc == 2
    one_error_line(err, "--demand", "finite")
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 3, "--mix", "MoE:1e308,DLRM:1e308", "--out", out)
    assert rc == 2
    one_error_line(err, "--mix", "finite")
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 3, "--median-duration-s", "1e9", "--out", out)
    assert rc == 2 and "--median-duration-s" in err and "Traceback" not in err
    assert cli(capsys, "trace", "generate", "--jobs", 3, "--demand", "65536:1", "--out", out)[0] == 0


def test_generator_library_bounds() -> None:
    assert parse_demand("65536:1") == {MAX_JOB_GPUS: 1.0}
    for text in ("65537:1", "100000000000000000000:1", "2:1e308,4:1e308"):
        with pytest.raises(DeepShareError, match="GPU demand"):
            parse_demand(text)
    with pytest.raises(DeepShareError, match="more than the cluster's 8"):
        parse_demand("16:1", cluster_gpus=8)
    with pytest.raises(DeepShareError, match="GPU demand"):
        generate(3, demand={10**20: 1.0})
    with pytest.raises(DeepShareError, match="median_duration_s"):
        generate(3, median_duration_s=1e9)
    with pytest.raises(DeepShareError, match="finite"):
        ModelMix((("MoE", 1e308), ("DLRM", 1e308)))
    # wide draws are capped at a year, durations and time limits alike
    for recurrence in (None, RecurrenceModel(requested_share=1.0, overestimate_sigma=5.0)):
        jobs = generate(2000, median_duration_s=MAX_DURATION_S / 2, duration_sigma=5.0, seed=1, recurrence=recurrence).jobs
        assert all(in_bounds(j) for j in jobs)
        assert max(j.duration_s for j in jobs) == MAX_DURATION_S


# -- JobSpec, the library's last line ----------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"gpus": 0}, "'gpus'"),
        ({"gpus": MAX_JOB_GPUS + 1}, "'gpus'"),
        ({"gpus": 10**20}, "'gpus'"),
        ({"gpus": 2.0}, "'gpus'"),
        ({"gpus": True}, "'gpus'"),
        ({"submit_time": -1.0}, "'submit_time'"),
        ({"submit_time": 1e12}, "'submit_time'"),
        ({"submit_time": math.nan}, "'submit_time'"),
        ({"duration_s": 0.0}, "'duration_s'"),
        ({"duration_s": MAX_DURATION_S * 1.01}, "'duration_s'"),
        ({"duration_s": math.inf}, "'duration_s'"),
        ({"duration_s": None, "total_samples": 1e19}, "'total_samples'"),
        ({"duration_s": None, "total_samples": math.nan}, "'total_samples'"),
        ({"requested_s": 4e7}, "'requested_s'"),
        ({"requested_s": math.nan}, "'requested_s'"),
    ],
)
def test_jobspec_refuses_values_out_of_bounds(kwargs: dict, field: str) -> None:
    fields = {"job_id": "j", "model": "MoE", "gpus": 2, "submit_time": 0.0, "duration_s": 100.0, **kwargs}
    with pytest.raises(DeepShareError, match=f"job 'j': field {field}: expected .*, got"):
        JobSpec(**fields)


def test_jobspec_accepts_the_bounds_and_numpy_scalars() -> None:
    job = JobSpec("j", "MoE", np.int64(MAX_JOB_GPUS), np.float32(MAX_TIMESTAMP_S / 2), duration_s=MAX_DURATION_S,
                  requested_s=np.float64(MAX_DURATION_S))
    assert job.gpus == MAX_JOB_GPUS and type(job.gpus) is int
    assert JobSpec("k", "MoE", 1, total_samples=MAX_SAMPLES).total_samples == MAX_SAMPLES


# -- whatever a reader accepts is within the bounds --------------------------------------------
_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10.0, max_value=1e8),
    st.integers(min_value=-(10**25), max_value=10**25),
    st.sampled_from([0, 1, 65536, 65537, 31536000, 31536001, 1e11, 1e18, 1e19, 1e308, 2.5, -0.0]),
)
_CELLS = st.one_of(
    _NUMBERS.map(repr),
    st.sampled_from(["", "nan", "inf", "-inf", "1e400", "1_000", "0x10", "  7 ", "4.0", "²"]),
)


@settings(max_examples=400, deadline=None)
@given(submit=_CELLS, gpus=_CELLS, work=_CELLS, by_samples=st.booleans(), requested=_CELLS)
def test_canonical_reader_accepts_only_values_within_bounds(
    submit: str, gpus: str, work: str, by_samples: bool, requested: str
) -> None:
    row = ["a", submit, "MoE", gpus, "" if by_samples else work, work if by_samples else "", requested]
    text = CANONICAL_HEADER + "\nok,0,MoE,1,10,,\n" + ",".join(f'"{c}"' for c in row) + "\n"
    try:
        trace = canonical.parse(text, "t.csv")
    except DeepShareError as exc:
        assert str(exc).startswith("t.csv line 3: "), str(exc)
        return
    assert all(in_bounds(job) for job in trace.jobs)


@settings(max_examples=300, deadline=None)
@given(inst=_CELLS, plan=_CELLS, start=_CELLS, end=_CELLS)
def test_pai_reader_accepts_only_values_within_bounds(inst: str, plan: str, start: str, end: str) -> None:
    text = PAI_HEADER + "\nok,t,1,100,1,2\n" + ",".join(f'"{c}"' for c in ("j", "t", inst, plan, start, end)) + "\n"
    try:
        trace = pai.parse(text, "p.csv")
    except DeepShareError as exc:
        assert str(exc).startswith("p.csv line 3: "), str(exc)
        return
    assert all(in_bounds(job) for job in trace.jobs)


@settings(max_examples=300, deadline=None)
@given(
    elapsed=st.lists(st.integers(min_value=0, max_value=10**6).map(str) | st.sampled_from(["", "5.5", "x"]), min_size=1,
                     max_size=4),
    days=st.none() | st.integers(min_value=0, max_value=10**20),
    gpus=st.integers(min_value=0, max_value=10**20),
)
def test_slurm_reader_accepts_only_values_within_bounds(elapsed: list[str], days: int | None, gpus: int) -> None:
    time = ("" if days is None else f"{days}-") + ":".join(elapsed)
    row = SLURM_OK.replace("|01:00:00|", f"|{time}|").replace("gres/gpu=2", f"gres/gpu={gpus}")
    try:
        trace = slurm.parse(f"{SLURM_HEADER}\n{row}\n", "s.txt")
    except DeepShareError as exc:
        assert str(exc).startswith("s.txt line 2: "), str(exc)
        return
    assert all(in_bounds(job) for job in trace.jobs)


# -- the bundled traces still load -------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "deepshare" / "data" / "traces").glob("*")) + sorted((ROOT.parent / "shared" / "data" / "traces").glob("*")),
    ids=lambda p: f"{p.parent.parent.parent.name}/{p.name}",
)
def test_bundled_traces_load_within_bounds(path: Path) -> None:
    trace = load(path)
    assert len(trace) > 0 and all(in_bounds(job) for job in trace.jobs)
