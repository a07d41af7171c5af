"""The Slurm ``sacct`` reader: steps passed over, GPUs from AllocTRES, limits, skips, located errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.traces import assign, detect_format, load, mix_preset
from deepshare.core.traces.slurm import alloc_gpus, slurm_seconds
from deepshare.core.types import JobSpec

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "slurm_sacct.txt"
HEADER = "JobID|JobName|User|Submit|Start|End|Elapsed|Timelimit|AllocTRES|State"
OK = "1|n|u|2024-03-01T09:00:00|2024-03-01T09:00:00|2024-03-01T09:01:00|00:01:00|00:10:00|gres/gpu=1|COMPLETED"
TWO = "2" + OK[1:]


def models(n: int) -> list[str]:
    return assign(n, mix_preset("random"), np.random.default_rng(0))


def sacct(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "jobs.txt"
    path.write_text("\n".join((header, *rows)) + "\n")
    return path


def test_fixture() -> None:
    trace = load(FIXTURE)
    assert trace.format == "slurm" and detect_format(FIXTURE) == "slurm"
    m = models(5)  # kept jobs in file order: 1001, 1002, 1003, 1007, 1009_1
    assert trace.jobs == (
        JobSpec("1001", m[0], 2, 0.0, duration_s=3600.0, user="alice", group="train_resnet", requested_s=14400.0),
        JobSpec("1003", m[2], 8, 600.0, duration_s=93600.0, user="bob", group="bert_ft"),  # Partition_Limit
        JobSpec("1002", m[1], 2, 1800.0, duration_s=3510.0, user="alice", group="train_resnet", requested_s=14400.0),
        JobSpec("1007", m[3], 1, 3000.0, duration_s=300.0, user="erin", group="debug", requested_s=1800.0),
        JobSpec("1009_1", m[4], 1, 3300.0, duration_s=600.0, user="frank", group="array", requested_s=900.0),
    )
    assert trace.skipped == (
        ("1004", "line 8: no GPU allocated (AllocTRES has no gres/gpu)"),
        ("1005", "line 9: not finished (State PENDING)"),
        ("1006", "line 10: not finished (State RUNNING)"),
        ("1008", "line 12: no GPU allocated (AllocTRES has no gres/gpu)"),
        ("1009_[2-4]", "line 15: not finished (State PENDING)"),
    )


@pytest.mark.parametrize(
    "text, seconds",
    [("00:05:12", 312), ("1-02:03:04", 93784), ("2-00", 172800), ("2-01:30", 178200), ("30", 1800),
     ("03:04.5", 184.5), ("12:00:00.25", 43200.25), ("10-00:00:00", 864000)],
)
def test_slurm_times(text: str, seconds: float) -> None:
    assert slurm_seconds(text, "f line 2", "Elapsed") == seconds


@pytest.mark.parametrize("text", ["", "a", "1:2:3:4", "1-", "-5", "1.5", "1.5:00", "x-1:00", "1:", "1h"])
def test_bad_slurm_times(text: str) -> None:
    with pytest.raises(DeepShareError, match="f line 2: field 'Elapsed': expected a Slurm time"):
        slurm_seconds(text, "f line 2", "Elapsed")


@pytest.mark.parametrize(
    "tres, gpus",
    [
        ("billing=8,cpu=8,gres/gpu=2,mem=64G,node=1", 2),
        ("billing=12,cpu=12,gres/gpu:a100=1,gres/gpu=1,mem=48000M,node=1", 1),  # typed and total: the total
        ("cpu=16,gres/gpu:a100=2,gres/gpu:v100=1,node=2", 3),  # typed only: their sum
        ("cpu=4,gres/gpumem=40G,mem=8G", 0),  # other GPU TRES are not GPUs
        ("", 0),
    ],
)
def test_alloc_gpus(tres: str, gpus: int) -> None:
    assert alloc_gpus(tres, "f line 2") == gpus


def test_parsable_with_trailing_pipe_and_no_state(tmp_path: Path) -> None:
    path = sacct(
        tmp_path,
        "7|n|u|2024-03-01T09:00:00|2024-03-01T09:02:00|2024-03-01T09:12:00|gres/gpu=4|",
        header="JobID|JobName|User|Submit|Start|End|AllocTRES|",
    )
    # no Elapsed column: End - Start
    assert load(path).jobs == (JobSpec("7", models(1)[0], 4, 0.0, duration_s=600.0, user="u", group="n"),)


def test_limits_that_mean_none(tmp_path: Path) -> None:
    rows = [OK.replace("00:10:00", limit).replace("1|", f"{i}|", 1) for i, limit in
            enumerate(["UNLIMITED", "Partition_Limit", "", "00:00:00", "1-00:00:00"], start=1)]
    assert [j.requested_s for j in load(sacct(tmp_path, *rows)).jobs] == [None, None, None, None, 86400.0]


@pytest.mark.parametrize(
    "row, fragments",
    [
        (TWO.replace("2024-03-01T09:00:00", "yesterday", 1), ["'Submit'", "a date", "'yesterday'"]),
        (TWO.replace("00:01:00", "1h"), ["'Elapsed'", "Slurm time", "'1h'"]),
        (TWO.replace("00:10:00", "soon"), ["'Timelimit'", "Slurm time", "'soon'"]),
        (TWO.replace("gres/gpu=1", "gres/gpu=two"), ["'AllocTRES'", "whole number of GPUs"]),
        (TWO.replace("gres/gpu=1", "cpu"), ["'AllocTRES'", "'name=count'"]),
        (TWO.replace("2|", "|", 1), ["'JobID'", "non-empty"]),
        (TWO.replace("|n|", "|a|b|"), ["expected 10 fields as in the header, got 11"]),
        (OK, ["duplicate job id '1'", "line 2"]),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path: Path, row: str, fragments: list[str]) -> None:
    with pytest.raises(DeepShareError) as info:
        load(sacct(tmp_path, OK, row))
    for fragment in ("jobs.txt line 3", *fragments):
        assert fragment in str(info.value), str(info.value)


def test_missing_columns_are_named(tmp_path: Path) -> None:
    with pytest.raises(DeepShareError, match="jobs.txt line 1: missing column 'Elapsed' \\(or both 'Start' and 'End'\\)"):
        load(sacct(tmp_path, "1|2024-03-01T09:00:00|gres/gpu=1", header="JobID|Submit|AllocTRES"))
    with pytest.raises(DeepShareError, match="missing required column.*'Submit'.*slurm"):
        load(sacct(tmp_path, "1|00:01:00|gres/gpu=1", header="JobID|Elapsed|AllocTRES"))


def test_blank_elapsed_falls_back_to_end_minus_start(tmp_path: Path) -> None:
    row = OK.replace("|00:01:00|", "||").replace("09:01:00", "09:03:30")
    assert load(sacct(tmp_path, row)).jobs[0].duration_s == 210.0
