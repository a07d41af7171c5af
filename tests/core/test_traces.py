"""Trace loaders, format detection, bad-input errors, the generator, mixes and statistics."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core import traces
from deepshare.core.traces import (
    FORMATS,
    ModelMix,
    Trace,
    assign,
    detect_format,
    generate,
    load,
    mix_preset,
    parse_demand,
    parse_mix,
    rate_for_load,
    trace_stats,
    write_canonical,
)
from deepshare.core.traces.mixes import mix_from_spec
from deepshare.core.bounds import MIN_WORK_S
from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec
from deepshare.core.workloads import default_catalog

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
BUNDLED = Path(__file__).parents[2] / "deepshare" / "data" / "traces"


def fixture(name: str) -> Path:
    return FIXTURES / name


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def expect_error(path: Path, *fragments: str, format: str | None = None) -> str:
    with pytest.raises(DeepShareError) as info:
        load(path, format=format)
    message = str(info.value)
    assert path.name in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def random_models(n: int, seed: int = 0) -> list[str]:
    return assign(n, mix_preset("random"), np.random.default_rng(seed))


# -- each loader on its fixture ----------------------------------------------------------------
def test_artifact_fixture() -> None:
    trace = load(fixture("artifact.json"))
    assert trace.format == "artifact"
    assert trace.source == str(fixture("artifact.json"))
    assert trace.skipped == ()
    assert trace.jobs == (
        JobSpec("a0", "DLRM", 2, 0.0, total_samples=5e6),
        JobSpec("a3", "GraphSage", 2, 0.0, total_samples=3e9),
        JobSpec("a2", "FSDP", 8, 60.5, total_samples=2000.0),
        JobSpec("a1", "MoE", 4, 120.0, total_samples=1000.5),
    )


def test_tiresias_fixture() -> None:
    trace = load(fixture("tiresias.csv"))
    assert trace.format == "tiresias"
    assert trace.jobs == (
        JobSpec("1", "vgg19", 2, 0.0, duration_s=3600.0),
        JobSpec("3", "bert", 8, 10.0, duration_s=7200.0),
        JobSpec("2", "resnet50", 4, 30.0, duration_s=1800.0),  # ties keep file order
        JobSpec("4", "MoE", 1, 30.0, duration_s=600.5),
    )


def test_helios_fixture() -> None:
    trace = load(fixture("helios.csv"))
    assert trace.format == "helios"
    m = random_models(3)  # kept jobs h1, h4, h6 in file order
    assert trace.jobs == (
        JobSpec("h1", m[0], 8, 0.0, duration_s=3600.0, user="u1", vc="vcA"),
        JobSpec("h4", m[1], 16, 10.0, duration_s=100.5, user="u3", vc="vcC"),
        JobSpec("h6", m[2], 4, 30.0, duration_s=900.0, user="u4", vc="vcA"),
    )
    skipped = dict(trace.skipped)
    assert list(skipped) == ["h2", "h3", "h5"]
    assert "CPU job" in skipped["h2"]
    assert "duration 0 s" in skipped["h3"]
    assert "duration missing" in skipped["h5"]


def test_helios_numeric_submit_times_are_normalised(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.csv",
        "job_id,vc,gpu_num,submit_time,duration\nx,v,2,1000,60\ny,v,4,400.5,30\n",
    )
    trace = load(path)
    m = random_models(2)
    assert trace.jobs == (
        JobSpec("y", m[1], 4, 0.0, duration_s=30.0, vc="v"), JobSpec("x", m[0], 2, 599.5, duration_s=60.0, vc="v")
    )


def test_philly_fixture_and_never_ran_jobs_are_skipped() -> None:
    trace = load(fixture("philly.json"))
    assert trace.format == "philly"
    m = random_models(3)  # kept jobs 1, 3, 5 in file order
    assert trace.jobs == (
        JobSpec("application_1", m[0], 4, 0.0, duration_s=600.0, user="u1", vc="vc1"),
        JobSpec("application_5", m[2], 2, 30.0, duration_s=3600.0, user="u3", vc="vc1"),
        JobSpec("application_3", m[1], 3, 300.0, duration_s=210.0, user="u1", vc="vc2"),
    )
    skipped = dict(trace.skipped)
    assert list(skipped) == ["application_2", "application_4"]
    assert all("never ran" in reason for reason in skipped.values())


def test_philly_other_skips(tmp_path: Path) -> None:
    jobs = [
        {"jobid": "ok", "submitted_time": "2017-10-03 02:00:00",
         "attempts": [{"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:01:00",
                       "detail": [{"ip": "a", "gpus": ["gpu0"]}]}]},
        {"jobid": "nogpu", "submitted_time": "2017-10-03 02:00:00",
         "attempts": [{"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:01:00", "detail": []}]},
        {"jobid": "backwards", "submitted_time": "2017-10-03 02:00:00",
         "attempts": [{"start_time": "2017-10-03 02:05:00", "end_time": "2017-10-03 02:01:00",
                       "detail": [{"ip": "a", "gpus": ["gpu0"]}]}]},
        {"jobid": "instant", "submitted_time": "2017-10-03 02:00:00",
         "attempts": [{"start_time": "2017-10-03 02:05:00", "end_time": "2017-10-03 02:05:00",
                       "detail": [{"ip": "a", "gpus": ["gpu0"]}]}]},
    ]
    trace = load(write(tmp_path, "philly.json", json.dumps(jobs)))
    assert [j.job_id for j in trace.jobs] == ["ok"]
    skipped = dict(trace.skipped)
    assert "no GPU" in skipped["nogpu"]
    assert "ends before it starts" in skipped["backwards"]
    assert "no run time" in skipped["instant"]


def test_a_philly_job_still_running_is_skipped_and_gpus_come_from_complete_attempts(tmp_path: Path) -> None:
    """The trace's README: a last attempt with a start and no end_time was still running when the
    log was taken, so the job's run time is unknown (it loaded as a finished 10-s job with the
    running attempt's 4 GPUs). An earlier incomplete attempt is a logging gap: passed over, its
    GPUs too."""
    def attempt(start, end, gpus):  # type: ignore[no-untyped-def]
        return {"start_time": f"2017-10-07 01:{start}", "end_time": None if end is None else f"2017-10-07 01:{end}",
                "detail": [{"ip": "m1", "gpus": [f"gpu{i}" for i in range(gpus)]}]}

    jobs = [{"jobid": "running", "submitted_time": "2017-10-07 01:00:00",
             "attempts": [attempt("00:10", "00:20", 1), attempt("00:30", None, 4)]},
            {"jobid": "gap", "submitted_time": "2017-10-07 01:00:00",
             "attempts": [attempt("00:10", None, 2), attempt("00:30", "01:30", 1)]}]
    trace = load(write(tmp_path, "philly.json", json.dumps(jobs)))
    assert [(j.job_id, j.gpus, j.duration_s) for j in trace.jobs] == [("gap", 1, 60.0)]
    assert "still running when the log was taken (attempts[1]" in dict(trace.skipped)["running"]


def test_canonical_fixture() -> None:
    trace = load(fixture("canonical.csv"))
    assert trace.format == "canonical"
    assert trace.jobs == (
        JobSpec("c1", "MoE", 4, 0.0, duration_s=3600.0),
        JobSpec("c3", "Transformer-XL", 8, 5.0, duration_s=1800.0),
        JobSpec("c2", "DLRM", 2, 12.5, total_samples=1e6),
    )


def test_mix_and_seed_drive_model_assignment() -> None:
    moe_only = ModelMix((("MoE", 1.0),))
    assert {j.model for j in load(fixture("philly.json"), mix=moe_only).jobs} == {"MoE"}
    a = load(fixture("helios.csv"), seed=7)
    assert a == load(fixture("helios.csv"), seed=7)
    assert [j.model for j in a.jobs] == random_models(3, seed=7)


# -- format detection --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, fmt",
    [
        ("artifact.json", "artifact"),
        ("tiresias.csv", "tiresias"),
        ("helios.csv", "helios"),
        ("philly.json", "philly"),
        ("canonical.csv", "canonical"),
        ("pai_joined.csv", "pai"),
        ("pai_tasks.csv", "pai"),
        ("slurm_sacct.txt", "slurm"),
    ],
)
def test_detect_format_by_content_not_extension(tmp_path: Path, name: str, fmt: str) -> None:
    assert detect_format(fixture(name)) == fmt
    disguised = tmp_path / "trace.txt"
    shutil.copy(fixture(name), disguised)
    assert detect_format(disguised) == fmt
    assert load(disguised).jobs == load(fixture(name)).jobs


def test_formats_listed() -> None:
    assert set(FORMATS) == {"artifact", "tiresias", "helios", "philly", "pai", "slurm", "canonical"}


def test_unrecognised_csv_names_tried_formats_and_header(tmp_path: Path) -> None:
    path = write(tmp_path, "weird.csv", "id,gpu,when\n1,2,3\n")
    with pytest.raises(DeepShareError) as info:
        detect_format(path)
    message = str(info.value)
    assert "weird.csv" in message and "unrecognised" in message and "id,gpu,when" in message
    for fmt in FORMATS:
        assert fmt in message


def test_unrecognised_json_names_keys_seen(tmp_path: Path) -> None:
    path = write(tmp_path, "weird.json", json.dumps({"x": {"gpus": 2}}))
    message = expect_error(path, "unrecognised", "'gpus'", "artifact", "philly")
    assert "tried" in message


def test_unknown_format_name_lists_valid_ones() -> None:
    with pytest.raises(DeepShareError) as info:
        load(fixture("artifact.json"), format="lsf")
    assert "lsf" in str(info.value)
    for fmt in FORMATS:
        assert fmt in str(info.value)


def test_forced_format_overrides_detection(tmp_path: Path) -> None:
    # A helios log without the 'vc' column is not auto-detected, but loads when forced.
    path = write(tmp_path, "novc.csv", "job_id,gpu_num,submit_time,duration\nj,2,0,10\n")
    with pytest.raises(DeepShareError):
        detect_format(path)
    assert len(load(path, format="helios")) == 1
    expect_error(fixture("tiresias.csv"), "line 1", "expected a JSON document", format="artifact")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    expect_error(tmp_path / "nope.json", "not found")
    with pytest.raises(DeepShareError, match="directory"):
        load(tmp_path)


def test_bad_seed() -> None:
    with pytest.raises(DeepShareError, match="seed"):
        load(fixture("helios.csv"), seed=-1)


# -- bad inputs --------------------------------------------------------------------------------
GARBAGE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\xfd"


@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_empty_file(tmp_path: Path, fmt: str | None) -> None:
    expect_error(write(tmp_path, "empty.trace", ""), "empty", format=fmt)
    expect_error(write(tmp_path, "blank.trace", "  \n\n"), "empty", format=fmt)


@pytest.mark.parametrize("fmt", [None, *FORMATS])
def test_binary_garbage(tmp_path: Path, fmt: str | None) -> None:
    expect_error(write(tmp_path, "garbage.bin", GARBAGE), "line 1", "UTF-8", format=fmt)
    expect_error(write(tmp_path, "nul.bin", "job_id,x\n1,\x002\n"), "line 2", "NUL", format=fmt)


@pytest.mark.parametrize("fmt", ["artifact", "philly"])
def test_truncated_json(tmp_path: Path, fmt: str) -> None:
    text = fixture(f"{fmt}.json").read_text()
    path = write(tmp_path, "cut.json", text[: len(text) // 2])
    expect_error(path, "line ", "column", "expected valid JSON", "truncated")
    expect_error(path, "line ", "expected valid JSON", format=fmt)


@pytest.mark.parametrize("name", ["tiresias.csv", "helios.csv", "canonical.csv", "pai_joined.csv", "slurm_sacct.txt"])
def test_truncated_csv_row(tmp_path: Path, name: str) -> None:
    lines = fixture(name).read_text().splitlines()
    cut = "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 3]
    expect_error(write(tmp_path, name, cut), f"line {len(lines)}", "fields", "truncated")


def test_unclosed_quote(tmp_path: Path) -> None:
    text = fixture("canonical.csv").read_text() + 'c9,1,"MoE,2,10,\n'
    expect_error(write(tmp_path, "quote.csv", text), "line 5")


def test_extra_fields(tmp_path: Path) -> None:
    text = fixture("tiresias.csv").read_text() + "5,2,0,10,MoE,60,0,extra\n"
    expect_error(write(tmp_path, "extra.csv", text), "line 6", "expected 7 fields", "got 8")


def test_blank_lines_keep_physical_line_numbers(tmp_path: Path) -> None:
    text = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n\n1,2,0,1,MoE,10,0\n\n2,abc,0,1,MoE,10,0\n"
    expect_error(write(tmp_path, "blank.csv", text), "line 5: field 'num_gpu'")


def test_crlf_and_bom(tmp_path: Path) -> None:
    text = "\ufeff" + fixture("tiresias.csv").read_text().replace("\n", "\r\n")
    assert load(write(tmp_path, "crlf.csv", text)).jobs == load(fixture("tiresias.csv")).jobs
    bad = text.replace("3,8,10", "3,x,10")
    expect_error(write(tmp_path, "crlf_bad.csv", bad), "line 4: field 'num_gpu'")


TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
TIRESIAS_OK = "1,2,0,1000,vgg19,3600,0\n"


@pytest.mark.parametrize(
    "row, fragments",
    [
        ("2,abc,0,1,MoE,10,0", ["line 3: field 'num_gpu': expected a positive integer up to 65,536, got 'abc'"]),
        ("2,0,0,1,MoE,10,0", ["line 3", "'num_gpu'", "positive integer", "'0'"]),
        ("2,-4,0,1,MoE,10,0", ["line 3", "'num_gpu'", "'-4'"]),
        ("2,2.5,0,1,MoE,10,0", ["line 3", "'num_gpu'", "'2.5'"]),
        ("2,2,-1,1,MoE,10,0", ["line 3", "'submit_time'", "non-negative", "'-1'"]),
        ("2,2,inf,1,MoE,10,0", ["line 3", "'submit_time'", "'inf'"]),
        ("2,2,0,1,MoE,nan,0", ["line 3", "'duration'", "positive number", "'nan'"]),
        ("2,2,0,1,MoE,-5,0", ["line 3", "'duration'", "'-5'"]),
        ("2,2,0,1,MoE,,0", ["line 3", "'duration'", "missing"]),
        ("2,2,0,1,,10,0", ["line 3", "'model_name'", "non-empty"]),
        (",2,0,1,MoE,10,0", ["line 3", "'job_id'"]),
        ("1,2,0,1,MoE,10,0", ["line 3", "duplicate job id '1'", "first seen at line 2"]),
    ],
)
def test_tiresias_bad_rows(tmp_path: Path, row: str, fragments: list[str]) -> None:
    expect_error(write(tmp_path, "trace.csv", TIRESIAS_HEADER + TIRESIAS_OK + row + "\n"), *fragments)


def test_tiresias_missing_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "trace.csv", "job_id,num_gpu,submit_time,model_name\n1,2,0,MoE\n")
    expect_error(path, "line 1", "missing required column", "'duration'", format="tiresias")
    path = write(tmp_path, "trace2.csv", "job_id,num_gpu,iterations,model_name\n1,2,0,MoE\n")
    expect_error(path, "'submit_time', 'duration'", "header has: job_id")


ARTIFACT_OK = {"a": {"model": "MoE", "gpu_demand": 2, "total_samples_to_train": 10.0}}


@pytest.mark.parametrize(
    "job, fragments",
    [
        ({"model": "MoE", "total_samples_to_train": 10.0}, ["job 'b'", "'gpu_demand'", "missing"]),
        ({"gpu_demand": 2, "total_samples_to_train": 10.0}, ["job 'b'", "'model'", "missing"]),
        ({"model": "MoE", "gpu_demand": 2}, ["job 'b'", "'total_samples_to_train'", "missing"]),
        ({"model": "MoE", "gpu_demand": "abc", "total_samples_to_train": 1}, ["'gpu_demand'", "positive integer", "'abc'"]),
        ({"model": "MoE", "gpu_demand": 0, "total_samples_to_train": 1}, ["job 'b'", "'gpu_demand'", "got 0"]),
        ({"model": "MoE", "gpu_demand": -2, "total_samples_to_train": 1}, ["'gpu_demand'", "got -2"]),
        ({"model": "MoE", "gpu_demand": True, "total_samples_to_train": 1}, ["'gpu_demand'", "got True"]),
        ({"model": "MoE", "gpu_demand": 2, "total_samples_to_train": math.nan}, ["'total_samples_to_train'", "nan"]),
        ({"model": "MoE", "gpu_demand": 2, "total_samples_to_train": math.inf}, ["'total_samples_to_train'", "inf"]),
        ({"model": "MoE", "gpu_demand": 2, "total_samples_to_train": 0}, ["'total_samples_to_train'", "positive"]),
        ({"model": "MoE", "gpu_demand": 2, "total_samples_to_train": 1, "arrival_time": -5}, ["'arrival_time'", "-5"]),
        ({"model": "MoE", "gpu_demand": 2, "total_samples_to_train": 1, "arrival_time": "x"}, ["'arrival_time'", "'x'"]),
        ({"model": 7, "gpu_demand": 2, "total_samples_to_train": 1}, ["'model'", "non-empty string", "got 7"]),
        (5, ["job 'b'", "expected a job"]),
    ],
)
def test_artifact_bad_jobs(tmp_path: Path, job: object, fragments: list[str]) -> None:
    path = write(tmp_path, "trace.json", json.dumps({**ARTIFACT_OK, "b": job}))
    expect_error(path, *fragments)


def test_artifact_duplicates(tmp_path: Path) -> None:
    job = json.dumps(ARTIFACT_OK["a"])
    expect_error(write(tmp_path, "dup.json", f'{{"a": {job}, "a": {job}}}'), "job 'a'", "duplicate job id")
    twice = '{"a": {"model": "MoE", "model": "DLRM", "gpu_demand": 2, "total_samples_to_train": 1}}'
    expect_error(write(tmp_path, "dupfield.json", twice), "job 'a'", "'model'", "twice")
    # ids are compared without surrounding spaces, as every CSV reader strips them: one id twice
    expect_error(write(tmp_path, "dupspace.json", f'{{"a": {job}, " a ": {job}}}'), "job ' a '", "duplicate job id 'a'")


def test_artifact_ids_lose_surrounding_spaces_and_write_back(tmp_path: Path) -> None:
    job = json.dumps(ARTIFACT_OK["a"])
    trace = load(write(tmp_path, "spaced.json", f'{{" a ": {job}}}'))
    assert [j.job_id for j in trace.jobs] == ["a"]
    write_canonical(trace.jobs, tmp_path / "back.csv")  # refused ' a ' before
    assert [j.job_id for j in load(tmp_path / "back.csv").jobs] == ["a"]


def test_artifact_wrong_shape(tmp_path: Path) -> None:
    expect_error(write(tmp_path, "list.json", "[1, 2]"), "expected a JSON object", format="artifact")
    expect_error(write(tmp_path, "emptyobj.json", "{}"), "empty", format="artifact")


PHILLY_OK = {
    "jobid": "j1",
    "submitted_time": "2017-10-03 02:00:00",
    "attempts": [{"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:01:00",
                  "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}],
}


@pytest.mark.parametrize(
    "change, fragments",
    [
        ({"jobid": None}, ["job at index 1", "'jobid'", "missing"]),
        ({"submitted_time": None}, ["job 'j2' (index 1)", "'submitted_time'", "missing"]),
        ({"submitted_time": "yesterday"}, ["job 'j2'", "'submitted_time'", "YYYY-MM-DD", "'yesterday'"]),
        ({"attempts": None}, ["job 'j2'", "'attempts'", "missing"]),
        ({"attempts": "x"}, ["job 'j2'", "'attempts'", "list"]),
        ({"attempts": [5]}, ["job 'j2'", "attempts[0]", "expected an attempt"]),
        ({"attempts": [{"start_time": "2017-10-03 02:00:00", "end_time": "soon", "detail": []}]},
         ["job 'j2'", "'attempts[0].end_time'", "'soon'"]),
        ({"attempts": [{"start_time": None, "end_time": None, "detail": "m1"}]},
         ["job 'j2'", "'attempts[0].detail'"]),
        ({"attempts": [{"start_time": None, "end_time": None, "detail": [{"ip": "m", "gpus": 4}]}]},
         ["job 'j2'", "'attempts[0].detail[0].gpus'", "got 4"]),
        ({"jobid": "j1"}, ["job 'j1' (index 1)", "duplicate job id", "first seen at index 0"]),
    ],
)
def test_philly_bad_jobs(tmp_path: Path, change: dict, fragments: list[str]) -> None:
    bad = {**PHILLY_OK, "jobid": "j2", **change}
    bad = {k: v for k, v in bad.items() if v is not None}
    expect_error(write(tmp_path, "log.json", json.dumps([PHILLY_OK, bad])), *fragments)


def test_philly_wrong_shape(tmp_path: Path) -> None:
    expect_error(write(tmp_path, "obj.json", json.dumps({"a": 1})), "expected a JSON list", format="philly")
    expect_error(write(tmp_path, "emptylist.json", "[]"), "empty", format="philly")
    expect_error(write(tmp_path, "scalars.json", json.dumps([PHILLY_OK, 3])), "index 1", "expected a job")


HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
HELIOS_OK = "h1,u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,,,60,0\n"


@pytest.mark.parametrize(
    "row, fragments",
    [
        ("h2,u,v,abc,1,1,COMPLETED,2020-04-01 00:00:00,,,60,0", ["line 3", "'gpu_num'", "'abc'"]),
        ("h2,u,v,-1,1,1,COMPLETED,2020-04-01 00:00:00,,,60,0", ["line 3", "'gpu_num'", "'-1'"]),
        ("h2,u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,,,abc,0", ["line 3", "'duration'", "'abc'"]),
        ("h2,u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,,,inf,0", ["line 3", "'duration'", "'inf'"]),
        ("h2,u,v,2,1,1,COMPLETED,2020-13-45 99:00:00,,,60,0", ["line 3", "'submit_time'", "'2020-13-45 99:00:00'"]),
        ("h2,u,v,2,1,1,COMPLETED,,,,60,0", ["line 3", "'submit_time'", "missing"]),
        ("h2,u,v,2,1,1,COMPLETED,100,,,60,0", ["line 3", "'submit_time'", "a date like line 2's"]),
        ("h1,u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,,,60,0", ["line 3", "duplicate job id 'h1'"]),
    ],
)
def test_helios_bad_rows(tmp_path: Path, row: str, fragments: list[str]) -> None:
    expect_error(write(tmp_path, "cluster_log.csv", HELIOS_HEADER + HELIOS_OK + row + "\n"), *fragments)


def test_helios_negative_and_nan_numeric_submit(tmp_path: Path) -> None:
    header = "job_id,vc,gpu_num,submit_time,duration\n"
    expect_error(write(tmp_path, "neg.csv", header + "a,v,2,-3,10\n"), "line 2", "'submit_time'", "'-3'")
    expect_error(write(tmp_path, "nan.csv", header + "a,v,2,nan,10\n"), "line 2", "'submit_time'", "'nan'")


def test_helios_missing_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "job_id,vc,submit_time,duration\nj,v,0,10\n")
    expect_error(path, "line 1", "'gpu_num'", format="helios")


CANON_HEADER = "job_id,submit_time,model,gpus,duration_s,total_samples\n"


@pytest.mark.parametrize(
    "row, fragments",
    [
        ("x,0,MoE,2,10,20", ["line 2", "'duration_s' and 'total_samples'", "both"]),
        ("x,0,MoE,2,,", ["line 2", "'duration_s' and 'total_samples'", "neither"]),
        ("x,0,MoE,two,10,", ["line 2", "'gpus'", "'two'"]),
        ("x,0,MoE,0,10,", ["line 2", "'gpus'", "'0'"]),
        ("x,-1,MoE,2,10,", ["line 2", "'submit_time'", "'-1'"]),
        ("x,0,MoE,2,inf,", ["line 2", "'duration_s'", "'inf'"]),
        ("x,0,MoE,2,,NaN", ["line 2", "'total_samples'", "'NaN'"]),
        ("x,0,,2,10,", ["line 2", "'model'"]),
    ],
)
def test_canonical_bad_rows(tmp_path: Path, row: str, fragments: list[str]) -> None:
    expect_error(write(tmp_path, "trace.csv", CANON_HEADER + row + "\n"), *fragments)


def test_canonical_duplicates_and_missing_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "dup.csv", CANON_HEADER + "x,0,MoE,2,10,\ny,0,MoE,2,10,\nx,1,MoE,2,10,\n")
    expect_error(path, "line 4", "duplicate job id 'x'", "first seen at line 2")
    path = write(tmp_path, "cols.csv", "job_id,gpus,duration_s\nx,2,10\n")
    expect_error(path, "line 1", "'submit_time', 'model', 'total_samples'")
    path = write(tmp_path, "duphead.csv", "job_id,gpus,gpus,duration_s\nx,2,2,10\n")
    expect_error(path, "line 1", "'gpus' appears twice")


FIXTURE_NAMES = [
    "artifact.json", "tiresias.csv", "helios.csv", "philly.json", "canonical.csv", "canonical_features.csv",
    "artifact_features.json", "helios_full.csv", "pai_joined.csv", "slurm_sacct.txt",
]
SNIPPETS = st.sampled_from(list('{}[]",:|0123456789.-eEnNT \n\r\t') + ["null", "true", "None", "NaN", "\xff", "\u2028"])


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(FIXTURE_NAMES),
    fmt=st.sampled_from([None, *FORMATS]),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 6), st.sampled_from(["", *"xyz"]) | SNIPPETS), max_size=4),
)
def test_mangled_files_only_raise_deepshare_error(name: str, fmt: str | None, edits: list) -> None:
    """Cut, delete and insert at random: a load either works or raises a located DeepShareError."""
    text = fixture(name).read_text()
    for where, cut, insert in edits:
        pos = int(where * len(text))
        text = text[:pos] + insert + text[pos + cut :]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mangled.trace"
        path.write_bytes(text.encode("utf-8", "surrogatepass").replace(b"\xc3\xbf", b"\xff"))
        try:
            load(path, format=fmt)
        except DeepShareError as exc:
            assert "mangled.trace" in str(exc)


# -- bundled traces ----------------------------------------------------------------------------
def test_bundled_traces_load() -> None:
    paths = sorted(BUNDLED.glob("*.json"))
    assert len(paths) == 10
    for path in paths:
        trace = load(path)
        assert trace.format == "artifact" and len(trace.jobs) == 256 and trace.skipped == ()
        assert all(j.submit_time == 0.0 and j.total_samples for j in trace.jobs)
        assert [j.job_id for j in trace.jobs] == [str(i) for i in range(256)]


def test_simulate_trace_mix() -> None:
    stats = trace_stats(load(BUNDLED / "deepshare-simulate-trace0.json"), default_catalog())
    assert stats.models == {
        "GraphSage": 70, "FSDP": 49, "DLRM": 37, "MobileNetV3": 36, "Transformer-XL": 34, "MoE": 30,
    }
    assert stats.gpu_demand == {2: 81, 4: 90, 8: 85}
    assert stats.jobs == 256 and stats.span_s == 0.0 and stats.arrival_rate_per_s is None
    # Each job is about an hour of ideal work (README); at the single-node reference rate a bit less.
    assert 2400 < stats.mean_duration_s < 3700


# -- generator ---------------------------------------------------------------------------------
def test_generator_deterministic_under_seed() -> None:
    a = generate(200, rate_per_s=0.01, duration_sigma=1.0, seed=3)
    assert a == generate(200, rate_per_s=0.01, duration_sigma=1.0, seed=3)
    b = generate(200, rate_per_s=0.01, duration_sigma=1.0, seed=4)
    assert a.jobs != b.jobs
    assert [j.submit_time for j in a.jobs] != [j.submit_time for j in b.jobs]
    assert [j.model for j in a.jobs] != [j.model for j in b.jobs]
    assert a.jobs[0].job_id == "job-00000" and a.jobs[-1].job_id == "job-00199"
    assert a.format == "generated"


def test_generator_poisson_rate() -> None:
    rate = 1 / 120
    trace = generate(5000, rate_per_s=rate, seed=11)
    submits = [j.submit_time for j in trace.jobs]
    assert submits[0] == 0.0
    assert submits == sorted(submits)
    mean_gap = (submits[-1] - submits[0]) / (len(submits) - 1)
    assert abs(mean_gap - 1 / rate) / (1 / rate) < 0.10
    gaps = np.diff(submits)
    assert abs(np.std(gaps) / np.mean(gaps) - 1.0) < 0.1  # exponential: cv = 1


def test_generator_load_to_rate_exact() -> None:
    # 4-GPU jobs of exactly 1 h on 32 GPUs at load 0.5: 16 GPUs busy = 4 jobs in flight,
    # one job per 900 s.
    assert rate_for_load(0.5, 32, {4: 1.0}, 3600.0, 0.0) == pytest.approx(1 / 900, rel=1e-12)
    # E[gpus] = (2*1 + 4*1 + 8*2) / 4 = 5.5; E[duration] = 3600 * exp(0.5).
    expected = 0.8 * 64 / (5.5 * 3600 * math.exp(0.5))
    assert rate_for_load(0.8, 64, {2: 1, 4: 1, 8: 2}, 3600.0, 1.0) == pytest.approx(expected, rel=1e-12)
    via_load = generate(50, load=0.5, total_gpus=32, demand={4: 1.0}, seed=5)
    via_rate = generate(50, rate_per_s=1 / 900, demand={4: 1.0}, seed=5)
    assert [j.submit_time for j in via_load.jobs] == pytest.approx([j.submit_time for j in via_rate.jobs])


def test_generator_defaults_durations_and_demand() -> None:
    trace = generate(3000, seed=2)
    assert all(j.submit_time == 0.0 for j in trace.jobs)
    assert all(j.duration_s == 3600.0 for j in trace.jobs)
    counts = {g: sum(j.gpus == g for j in trace.jobs) for g in (2, 4, 8)}
    assert sum(counts.values()) == 3000 and all(900 < c < 1100 for c in counts.values())
    spread = generate(4000, median_duration_s=600.0, duration_sigma=1.5, seed=2)
    durations = [j.duration_s for j in spread.jobs]
    assert 540 < statistics.median(durations) < 660
    assert np.std(np.log(durations)) == pytest.approx(1.5, rel=0.05)


def test_generator_streams_are_independent() -> None:
    a = generate(100, rate_per_s=0.1, seed=9)
    b = generate(100, rate_per_s=0.1, seed=9, mix=mix_preset("heavy"))
    assert [j.submit_time for j in a.jobs] == [j.submit_time for j in b.jobs]
    assert [j.gpus for j in a.jobs] == [j.gpus for j in b.jobs]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"n_jobs": 0}, "n_jobs"),
        ({"n_jobs": -3}, "n_jobs"),
        ({"n_jobs": 5, "rate_per_s": 0.0}, "rate_per_s"),
        ({"n_jobs": 5, "rate_per_s": -1.0}, "rate_per_s"),
        ({"n_jobs": 5, "rate_per_s": math.nan}, "rate_per_s"),
        ({"n_jobs": 5, "load": 0.0, "total_gpus": 32}, "load"),
        ({"n_jobs": 5, "load": 0.5}, "total_gpus"),
        ({"n_jobs": 5, "load": 0.5, "total_gpus": 0}, "total_gpus"),
        ({"n_jobs": 5, "load": 0.5, "total_gpus": 32, "rate_per_s": 1.0}, "not both"),
        ({"n_jobs": 5, "demand": {2: -1.0}}, "weight"),
        ({"n_jobs": 5, "demand": {0: 1.0}}, "positive integers"),
        ({"n_jobs": 5, "demand": {}}, "at least one"),
        ({"n_jobs": 5, "median_duration_s": 0.0}, "median_duration_s"),
        ({"n_jobs": 5, "duration_sigma": -1.0}, "duration_sigma"),
    ],
)
def test_generator_validates_arguments(kwargs: dict, fragment: str) -> None:
    n = kwargs.pop("n_jobs")
    with pytest.raises(DeepShareError, match=fragment):
        generate(n, **kwargs)


def test_parse_demand() -> None:
    assert parse_demand("2:0.3, 4:0.4,8:0.3") == {2: 0.3, 4: 0.4, 8: 0.3}
    for bad, fragment in [
        ("", "expected"),
        ("2", "gpus:weight"),
        ("x:1", "positive integer"),
        ("0:1", "positive integer"),
        ("2:abc", "positive number"),
        ("2:-1", "positive number"),
        ("2:inf", "positive number"),
        ("2:1,2:3", "twice"),
    ]:
        with pytest.raises(DeepShareError, match=fragment):
            parse_demand(bad)


# -- mixes -------------------------------------------------------------------------------------
def class_shares(mix: ModelMix, comm_class: dict[str, str]) -> dict[str, float]:
    shares: dict[str, float] = {}
    for model, p in mix.probabilities.items():
        shares[comm_class[model]] = shares.get(comm_class[model], 0.0) + p
    return shares


@pytest.mark.parametrize(
    "preset, expected",
    [
        ("heavy", {"heavy": 0.7, "medium": 0.2, "low": 0.1}),
        ("medium", {"heavy": 0.2, "medium": 0.6, "low": 0.2}),
        ("low", {"heavy": 0.1, "medium": 0.2, "low": 0.7}),
    ],
)
def test_mix_presets_put_stated_weight_on_classes(preset: str, expected: dict[str, float]) -> None:
    catalog = default_catalog()
    mix = mix_preset(preset, catalog)
    assert set(mix.models) == set(catalog.models)
    assert class_shares(mix, catalog.comm_class) == pytest.approx(expected)
    probs = mix.probabilities  # split evenly within a class
    for cls in expected:
        members = [probs[m] for m in catalog.models if catalog.comm_class[m] == cls]
        assert members == pytest.approx([members[0]] * len(members))


def test_random_preset_is_uniform() -> None:
    catalog = default_catalog()
    probs = mix_preset("random", catalog).probabilities
    assert list(probs) == list(catalog.models)
    assert list(probs.values()) == pytest.approx([1 / len(catalog.models)] * len(catalog.models))


def test_empty_class_weight_goes_to_others_proportionally() -> None:
    fake = SimpleNamespace(models=("A", "B", "C"), comm_class={"A": "heavy", "B": "heavy", "C": "low"})
    mix = mix_preset("heavy", fake)  # no medium model: its 0.2 is shared 7:1
    assert mix.probabilities == pytest.approx({"A": 0.4375, "B": 0.4375, "C": 0.125})


def test_parse_mix_and_spec() -> None:
    mix = parse_mix("MoE:2, DLRM:1")
    assert mix == ModelMix((("MoE", 2.0), ("DLRM", 1.0)))
    assert mix.probabilities == pytest.approx({"MoE": 2 / 3, "DLRM": 1 / 3})
    assert mix_from_spec("heavy") == mix_preset("heavy")
    assert mix_from_spec("MoE:1") == ModelMix((("MoE", 1.0),))
    assert mix_from_spec(None) == mix_preset("random")
    for bad, fragment in [
        ("", "expected"),
        ("MoE", "model:weight"),
        (":2", "model:weight"),
        ("MoE:x", "positive number"),
        ("MoE:0", "positive number"),
        ("MoE:nan", "positive number"),
        ("MoE:1,MoE:2", "twice"),
    ]:
        with pytest.raises(DeepShareError, match=fragment):
            parse_mix(bad)
    with pytest.raises(DeepShareError, match="presets are"):
        mix_preset("spicy")
    with pytest.raises(DeepShareError, match="preset"):
        mix_from_spec("spicy")
    with pytest.raises(DeepShareError):
        ModelMix(())


def test_assign_seeded_and_deterministic() -> None:
    mix = mix_preset("heavy")
    a = assign(1000, mix, np.random.default_rng(1))
    assert a == assign(1000, mix, np.random.default_rng(1))
    assert a != assign(1000, mix, np.random.default_rng(2))
    assert assign(0, mix, np.random.default_rng(1)) == []
    share_heavy = sum(default_catalog().comm_class[m] == "heavy" for m in a) / len(a)
    assert abs(share_heavy - 0.7) < 0.05


# -- canonical round trip ----------------------------------------------------------------------
def test_write_canonical_round_trip(tmp_path: Path) -> None:
    for name in ("artifact.json", "tiresias.csv", "philly.json"):
        trace = load(fixture(name))
        path = write_canonical(trace, tmp_path / f"{name}.csv")
        back = load(path)
        assert back.format == "canonical" and back.jobs == trace.jobs
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_write_canonical_errors_leave_nothing_behind(tmp_path: Path) -> None:
    trace = load(fixture("canonical.csv"))
    with pytest.raises(DeepShareError, match="cannot write"):
        write_canonical(trace, tmp_path / "missing-dir" / "x.csv")
    (tmp_path / "taken").mkdir()
    with pytest.raises(DeepShareError, match="cannot write"):
        write_canonical(trace, tmp_path / "taken")
    assert sorted(os.listdir(tmp_path)) == ["taken"]
    with pytest.raises(DeepShareError, match="whitespace"):
        write_canonical([JobSpec(" x", "MoE", 2, duration_s=1.0)], tmp_path / "ws.csv")
    with pytest.raises(DeepShareError, match="one line"):
        write_canonical([JobSpec("x", "Mo\rE", 2, duration_s=1.0)], tmp_path / "cr.csv")
    with pytest.raises(DeepShareError, match="duplicate"):
        write_canonical([JobSpec("x", "MoE", 2, duration_s=1.0)] * 2, tmp_path / "dup.csv")
    assert sorted(os.listdir(tmp_path)) == ["taken"]


def test_write_canonical_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_canonical(load(fixture("tiresias.csv")), path)
    write_canonical(load(fixture("canonical.csv")), path)
    assert load(path).jobs == load(fixture("canonical.csv")).jobs


names = st.text(min_size=1, max_size=12).filter(
    lambda s: s == s.strip() and s.strip() and not any(c in s for c in "\x00\r\n")
)
positive = st.floats(min_value=0.0, max_value=3e7, exclude_min=True, allow_nan=False, allow_infinity=False)  # < a year
work_s = st.floats(min_value=MIN_WORK_S, max_value=3e7, allow_nan=False, allow_infinity=False)  # a job's least work to a year


@st.composite
def job_lists(draw: st.DrawFn) -> list[JobSpec]:
    ids = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    jobs = []
    for job_id in ids:
        work = draw(work_s)
        by_samples = draw(st.booleans())
        jobs.append(
            JobSpec(
                job_id,
                draw(names),
                draw(st.integers(min_value=1, max_value=1024)),
                draw(st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)),
                total_samples=work if by_samples else None,
                duration_s=None if by_samples else work,
                user=draw(st.none() | names),
                group=draw(st.none() | names),
                vc=draw(st.none() | names),
                requested_s=draw(st.none() | positive),
            )
        )
    return jobs


@settings(max_examples=300, deadline=None)
@given(job_lists())
def test_canonical_round_trip_property(jobs: list[JobSpec]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = write_canonical(jobs, Path(folder) / "trace.csv")
        back = load(path, format="canonical")
        assert back.jobs == tuple(sorted(jobs, key=lambda j: j.submit_time))
        assert detect_format(path) == "canonical"


# -- statistics --------------------------------------------------------------------------------
def test_trace_stats_of_generated_trace() -> None:
    trace = generate(101, rate_per_s=0.5, demand={4: 1.0}, median_duration_s=1800.0, seed=1)
    stats = trace_stats(trace)
    assert stats.jobs == 101 and stats.skipped == 0
    assert stats.arrival_rate_per_s == pytest.approx(100 / stats.span_s)
    assert stats.gpu_demand == {4: 101}
    assert stats.gpu_hours == pytest.approx(101 * 4 * 0.5)
    assert stats.mean_duration_s == stats.median_duration_s == 1800.0
    assert sum(stats.models.values()) == sum(stats.comm_classes.values()) == 101
    json.dumps(stats.to_dict())


def test_trace_stats_converts_samples_and_counts_skipped() -> None:
    catalog = default_catalog()
    trace = Trace((JobSpec("x", "FSDP", 4, total_samples=catalog.reference_throughput("FSDP", 4) * 7200),), "t", "t")
    stats = trace_stats(trace, catalog)
    assert stats.mean_duration_s == pytest.approx(7200)
    assert stats.gpu_hours == pytest.approx(8.0)
    assert stats.comm_classes == {"heavy": 1}
    assert trace_stats(load(fixture("philly.json"))).skipped == 2


def test_public_api_exports() -> None:
    for name in ("load", "detect_format", "FORMATS", "Trace", "generate", "write_canonical", "trace_stats"):
        assert hasattr(traces, name)


def test_a_trace_without_a_job_to_simulate_is_an_error_naming_why(tmp_path: Path) -> None:
    """A header alone, or a file whose every job is skipped, would run to an empty report with
    exit 0; ``trace stats`` (``allow_empty``) still shows it."""
    header_only = tmp_path / "header.csv"
    header_only.write_text("job_id,submit_time,gpus,duration_s,model,total_samples\n")
    with pytest.raises(DeepShareError, match=r"header\.csv: no job to simulate: it has no job rows$"):
        load(header_only)
    assert len(load(header_only, allow_empty=True)) == 0

    lines = fixture("helios.csv").read_text().splitlines()
    cpu_only = tmp_path / "cpu.csv"
    cpu_only.write_text("\n".join([lines[0], *(line for line in lines[1:] if line.startswith("h2,"))]) + "\n")
    with pytest.raises(DeepShareError, match=r"cpu\.csv: no job to simulate: all 1 of its jobs were skipped "
                                             r"\(the first, h2: .*CPU job"):
        load(cpu_only)
