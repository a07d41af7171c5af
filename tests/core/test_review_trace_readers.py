"""Trace readers (review): what a bad or hostile file got past them before, each case by hand.

* a date written with another script's digits (strptime reads any) was a date;
* a Helios numeric ``submit_time`` had no bound: 1e20 and 1e20 + 1,000 s loaded at one instant;
* a PAI job asking for a tiny share of a GPU was 0 GPUs and failed the file, naming ``gpus``;
* Slurm's missing-``Elapsed`` error said "line 1" wherever the header was;
* Philly's summed run time and GPU total were named as JobSpec's fields, not the log's;
* a JSON integer of more digits than Python converts gave Python's advice, no line;
* the header's duplicate-column check compared every pair (40,000 columns: 14 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepshare.core.documents import load_json
from deepshare.core.errors import DeepShareError
from deepshare.core.traces import load
from deepshare.core.traces.base import _first_repeated

ARABIC_2020 = "\u0662\u0660\u0662\u0660"  # 2020 in Arabic-Indic digits


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, *fragments: str, **kwargs) -> str:
    with pytest.raises(DeepShareError) as info:
        load(path, **kwargs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def philly_job(**change) -> dict:
    job = {"jobid": "j1", "submitted_time": "2017-10-03 02:00:00",
           "attempts": [{"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:01:00",
                         "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}
    return {**job, **change}


def test_dates_are_ascii_digits_in_every_reader(tmp_path: Path) -> None:
    helios = write(tmp_path, "h.csv", "job_id,vc,gpu_num,submit_time,duration\n"
                   f"a,v,1,2020-04-01 00:00:00,10\nb,v,1,{ARABIC_2020}-04-01 00:00:10,10\n")
    refused(helios, "h.csv line 3", "'submit_time'", "a date")
    philly = write(tmp_path, "p.json", json.dumps([philly_job(submitted_time=f"{ARABIC_2020}-10-03 02:00:00")]))
    refused(philly, "p.json job 'j1'", "'submitted_time'", "a date", format="philly")
    slurm = write(tmp_path, "s.txt", "JobID|Submit|Elapsed|AllocTRES|State\n"
                  f"1|{ARABIC_2020}-03-01 09:00:00|00:01:00|gres/gpu=1|COMPLETED\n")
    refused(slurm, "s.txt line 2", "'Submit'", format="slurm")


def test_dates_in_ascii_still_read(tmp_path: Path) -> None:
    helios = write(tmp_path, "h.csv", "job_id,vc,gpu_num,submit_time,duration\n"
                   "a,v,1,2020-04-01 00:00:00,10\nb,v,1,2020-04-01 00:00:10,10\n")
    assert [job.submit_time for job in load(helios).jobs] == [0.0, 10.0]


@pytest.mark.parametrize("value", ["1e20", "100000000001", "1e17"])
def test_a_helios_numeric_submit_time_is_a_clock_reading_up_to_1e11(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, "h.csv", f"job_id,vc,gpu_num,submit_time,duration\na,v,1,{value},100\nb,v,1,0,100\n")
    refused(path, "h.csv line 2", "'submit_time'", "up to 1e+11", repr(value))


def test_a_helios_numeric_submit_time_within_the_bound_keeps_its_seconds(tmp_path: Path) -> None:
    path = write(tmp_path, "h.csv", "job_id,vc,gpu_num,submit_time,duration\na,v,1,1e11,100\nb,v,1,99999999000,100\n")
    assert sorted(job.submit_time for job in load(path).jobs) == [0.0, 1000.0]


@pytest.mark.parametrize("plan_gpu", ["0.00005", "0.0001", "1e-9"])
def test_a_pai_job_with_a_tiny_gpu_share_asks_for_one_gpu(tmp_path: Path, plan_gpu: str) -> None:
    path = write(tmp_path, "pai.csv", "job_name,task_name,inst_num,status,start_time,end_time,plan_gpu\n"
                 f"j,worker,1,Terminated,100,110,{plan_gpu}\n")
    (job,) = load(path, format="pai").jobs
    assert (job.job_id, job.gpus, job.duration_s) == ("j", 1, 10.0)


def test_slurm_names_the_header_line_when_elapsed_is_missing(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.txt", "\n\nJobID|Submit|AllocTRES|State\n1|2024-03-01T09:00:00|gres/gpu=1|COMPLETED\n")
    refused(path, "jobs.txt line 3: missing column 'Elapsed' (or both 'Start' and 'End')", format="slurm")


def test_slurm_with_start_and_end_but_no_elapsed_still_reads(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.txt", "JobID|Submit|Start|End|AllocTRES|State\n"
                 "1|2024-03-01T09:00:00|2024-03-01T09:00:00|2024-03-01T09:02:00|gres/gpu=1|COMPLETED\n")
    assert load(path, format="slurm").jobs[0].duration_s == 120.0


def test_philly_names_the_logs_fields_for_a_run_time_past_a_year(tmp_path: Path) -> None:
    attempts = [{"start_time": "2017-01-01 00:00:00", "end_time": "2017-12-31 00:00:00", "detail": [{"gpus": ["g"]}]},
                {"start_time": "2018-01-01 00:00:00", "end_time": "2018-12-31 00:00:00", "detail": [{"gpus": ["g"]}]}]
    path = write(tmp_path, "p.json", json.dumps([philly_job(attempts=attempts)]))
    message = refused(path, "p.json job 'j1' (index 0)", "attempts: run time", "at most a year", format="philly")
    assert "duration_s" not in message


def test_philly_names_the_attempt_holding_more_than_65536_gpus(tmp_path: Path) -> None:
    detail = [{"ip": f"m{i}", "gpus": [f"g{k}" for k in range(7_000)]} for i in range(10)]
    attempts = [{"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 02:01:00", "detail": detail}]
    path = write(tmp_path, "p.json", json.dumps([philly_job(attempts=attempts)]))
    message = refused(path, "p.json job 'j1' (index 0)", "'attempts[0].detail'", "65,536", "70000", format="philly")
    assert "'gpus'" not in message


def test_a_json_integer_too_long_for_python_is_named_by_its_line(tmp_path: Path) -> None:
    text = '[\n {"jobid": "j1",\n  "submitted_time": ' + "9" * 5000 + "}\n]\n"
    message = refused(write(tmp_path, "p.json", text), "p.json line 3", "4,300 digits", "5,000", format="philly")
    assert "set_int_max_str_digits" not in message


def test_a_header_naming_a_column_twice_is_refused_by_the_first_repeat(tmp_path: Path) -> None:
    assert _first_repeated(["a", "b", "c", "b", "a"]) == "b"
    assert _first_repeated([f"c{i}" for i in range(40_000)]) is None
    path = write(tmp_path, "t.csv", "job_id,submit_time,gpus,x,duration_s,x\n")
    refused(path, "t.csv line 1", "column 'x' appears twice")


def test_only_a_real_integer_outside_strings_is_named_as_too_long(tmp_path: Path) -> None:
    """Second read: the first version scanned strings too and answered any ValueError."""
    digits = "7" * 5000
    text = '[\n {"jobid": "' + digits + '", "x": 1},\n {"jobid": "b", "submitted_time": 1.5,\n  "n": 3,\n  "big": ' \
        + "8" * 4400 + "}\n]\n"
    refused(write(tmp_path, "p.json", text), "p.json line 5", "got one of 4,400", format="philly")
    with pytest.raises(DeepShareError) as info:  # a bad byte, and a long id string: the byte is named
        load_json(b'{\n "id": "' + digits.encode() + b'",\n "name": "caf\xe9"\n}', "jobs.json")
    assert "not valid JSON" in str(info.value) and "4,300" not in str(info.value)


def test_a_date_with_trailing_non_ascii_blank_still_reads(tmp_path: Path) -> None:
    """JSON values are not stripped as CSV cells are: the no-break space is stripped before the check."""
    path = write(tmp_path, "p.json", json.dumps([philly_job(submitted_time="2017-10-03 02:00:00\u00a0")]))
    assert load(path, format="philly").jobs[0].duration_s == 60.0


def test_a_parsable_header_with_a_trailing_bar_lists_its_columns_without_an_empty_one(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.txt", "JobID|Submit|Start|AllocTRES|State|\n1|2024-03-01T09:00:00|x|gres/gpu=1|COMPLETED|\n")
    message = refused(path, "jobs.txt line 1", "the header has: JobID, Submit, Start, AllocTRES, State", format="slurm")
    assert not message.rstrip().endswith(",")


def test_a_too_long_integer_is_judged_by_the_limit_python_applies_now(tmp_path: Path) -> None:
    """Third read: the limit was written in (4,300); raised to 6,000, a 5,000-digit integer is
    read and the 7,000-digit one after it is the one named."""
    import sys

    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(6000)
    try:
        with pytest.raises(DeepShareError) as info:
            load_json('{"a": ' + "1" * 5000 + ',\n "b": ' + "2" * 7000 + "}", "g.json")
    finally:
        sys.set_int_max_str_digits(before)
    assert str(info.value) == "g.json line 2: expected a number of at most 6,000 digits, got one of 7,000"
