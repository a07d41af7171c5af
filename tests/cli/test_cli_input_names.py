"""Bad input files and values name the flag (and the file's own field or column) they came from:
an empty path, a link-parameter file of the wrong shape, a trace value past its bound, an
export-policy name or seed list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli, one_error_line
from policy_files import write_policy_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_LINK = json.loads((ROOT / "deepshare" / "data" / "link_params.json").read_text())


def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\nj0,0,FSDP,2,600,\n")
    return path


@pytest.mark.parametrize("flag, extra", [("--tenants", ()), ("--history", ()), ("--link-params", ("--contention", "link")),
                                         ("--true-params", ("--contention", "link"))])
def test_an_empty_input_path_names_its_flag(capsys, tmp_path, flag, extra):
    rc, _, err = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+spread", *extra, flag, "")
    assert rc == 2
    one_error_line(err, f"{flag} '': an empty path")


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["kappa"].update({"FSDP": -1.0}), "kappa.FSDP: expected a mapping of aggressor models to factors, got -1.0"),
    (lambda d: d.update({"sensitivity": "x"}), "sensitivity: expected a mapping of models to mappings"),
    (lambda d: d["sensitivity"].update({"FSDP": {"8,2": "big"}}), "sensitivity.FSDP.8,2: expected a number, got 'big'"),
    (lambda d: d.update({"scale": {"FSDP": [1]}}), "scale.FSDP: expected a number, got [1]"),
    (lambda d: d["models"].update({"FSDP": 3}), "models.FSDP: expected a mapping of link parameters, got 3"),
    (lambda d: d.pop("models"), "models: missing"),
])
def test_a_link_parameter_file_of_the_wrong_shape_names_the_flag_and_field(capsys, tmp_path, change, needle):
    doc = json.loads(json.dumps(SHIPPED_LINK))
    change(doc)
    path = tmp_path / "lp.json"
    path.write_text(json.dumps(doc))
    rc, _, err = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+spread", "--contention", "link",
                     "--link-params", path)
    assert rc == 2
    one_error_line(err, f"--link-params: {path}: {needle}")


def test_a_link_parameter_file_holding_a_list_says_what_was_expected(capsys, tmp_path):
    path = tmp_path / "lp.json"
    path.write_text("[1, 2]")
    rc, _, err = cli(capsys, "simulate", "--trace", small_trace(tmp_path), "--policy", "fifo+spread", "--contention", "link",
                     "--link-params", path)
    assert rc == 2
    one_error_line(err, f"--link-params: {path}: expected a link-parameter file's object")


@pytest.mark.parametrize("name, text, needle", [
    ("tir.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n1,4,0,100,resnet50,1e12,0\n",
     "line 2: field 'duration': expected a positive number up to 31,536,000 (a year)"),
    ("tir.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n1,4,1e12,100,resnet50,100,0\n",
     "line 2: field 'submit_time': expected a non-negative number up to 1e+11"),
    ("h.csv", "job_id,vc,gpu_num,submit_time,duration\n1,v,2,0,1e12\n", "line 2: field 'duration': expected"),
    ("art.json", '{"a": {"model": "FSDP", "gpu_demand": 2, "arrival_time": 1e12, "total_samples_to_train": 100}}',
     "job 'a': field 'arrival_time'"),
    ("art.json", '{"a": {"model": "FSDP", "gpu_demand": 2, "arrival_time": 0, "total_samples_to_train": 1e19}}',
     "job 'a': field 'total_samples_to_train'"),
])
def test_a_trace_value_past_its_bound_names_the_files_own_field(capsys, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    rc, _, err = cli(capsys, "simulate", "--trace", path, "--policy", "fifo+spread")
    assert rc == 2
    one_error_line(err, needle)


@pytest.mark.parametrize("flags, needle", [
    (("--loaded-by", ""), "--loaded-by: unknown policy ''"),
    (("--seeds-tried", "99999999999999999999999"), "--seeds-tried '99999999999999999999999': expected seeds from 0 to"),
    (("--seeds-tried", "5,6"), "--seeds-tried '5,6': must include the file's training seed 3"),
])
def test_export_policy_names_the_flag(capsys, tmp_path, flags, needle):
    source = write_policy_file(tmp_path / "src.pt", {"seed": 3, "iterations": 1, "config": "c.yaml"})
    out = tmp_path / "out.pt"
    rc, _, err = cli(capsys, "export-policy", source, "--out", out, "--kind", "network", "--figures-note", "x", *flags)
    assert rc == 2
    one_error_line(err, needle)
    assert not out.exists() and not (tmp_path / "out.card.yaml").exists()
