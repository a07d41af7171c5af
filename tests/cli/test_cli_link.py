"""`deepshare calibrate` and `--contention link` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli as run  # (exit status, stdout, stderr)

from deepshare.core.contention.link import load_link_catalog
from deepshare.core.contention.link.calibrate import Dataset, PairModel
from deepshare.core.contention.link.samples import parse_samples
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import Catalog, ProfileKey

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
JSON_KEYS = {"fit_mae", "cv_mae", "baseline_mean_mae", "baseline_nearest_mae", "parameters"}


def write_profiles(folder: Path) -> None:
    """Tiny profiles (2 models x 5 placements) produced by the pair model from known values."""
    keys = [ProfileKey(m, g, n) for m in ("A", "B") for g, n in ((2, 2), (4, 2), (4, 4), (8, 2), (8, 4))]
    model = PairModel(Dataset.from_catalog(Catalog({k: 1.0 for k in keys}, {(v, a): 1.0 for v in keys for a in keys})))
    import numpy as np

    per_model = np.log([[0.2, 0.5, 0.02, 1.0, 16, 0.01, 0.2, 0.3], [0.6, 0.1, 0.01, 1.0, 64, 0.02, 0.1, 0.1]])
    x = np.concatenate([np.hstack([per_model, np.zeros((2, 2))]).reshape(-1), np.zeros(4 + len(model.data.keys))])
    throughput, ratio = model.predict(x)
    d = model.data
    folder.mkdir(exist_ok=True)
    (folder / "isolated_thp.csv").write_text(",isol_thp\n" + "".join(f'"{k}",{t}\n' for k, t in zip(d.keys, throughput)))
    cells = {(d.keys[v], d.keys[a]): r for v, a, r in zip(d.victim, d.aggressor, ratio)}
    header = "," + ",".join(f'"{k}"' for k in d.keys) + "\n"
    rows = "".join(f'"{v}",' + ",".join(f"{cells[(v, a)]:.6f}" for a in d.keys) + "\n" for v in d.keys)
    (folder / "shared_thp_ratio.csv").write_text(header + rows)


@pytest.mark.slow  # a calibration fit (~9 s on a busy box)
def test_calibrate_writes_report_and_parameters_usable_by_simulate(capsys, tmp_path):
    write_profiles(tmp_path / "prof")
    rc, out, err = run(capsys, "calibrate", "--profiles", tmp_path / "prof", "--starts", 1, "--folds", 2,
                       "--workers", 1, "--json", tmp_path / "cal.json", "--out", tmp_path / "params.json")
    assert rc == 0, err
    assert "cross-validated" in out and "nearest measured cell" in out
    doc = json.loads((tmp_path / "cal.json").read_text())
    assert JSON_KEYS <= set(doc)
    assert doc["fit_mae"] < 0.01 and doc["cells"] == 100
    assert set(doc["parameters"]["models"]) == {"A", "B"}
    assert set(load_link_catalog(tmp_path / "params.json").params) >= {"A", "B", "resnet50"}
    rc, out, err = run(capsys, "simulate", "--trace", TRACE, "--policy", "las+spread", "--contention", "link",
                       "--link-params", tmp_path / "params.json", "--json", tmp_path / "r.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["finished"] == 256


def test_link_contention_slows_spread_jobs_more_than_consolidated_ones(capsys, tmp_path):
    results = {}
    for policy in ("las+spread", "las+consolidated"):
        rc, _, err = run(capsys, "simulate", "--trace", TRACE, "--policy", policy, "--contention", "link",
                         "--json", tmp_path / f"{policy}.json")
        assert rc == 0, err
        results[policy] = json.loads((tmp_path / f"{policy}.json").read_text())
    assert results["las+spread"]["avg_slowdown"] > results["las+consolidated"]["avg_slowdown"] >= 1.0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["calibrate"], "exactly one of --profiles"),
        (["calibrate", "--profiles", "/nonexistent"], "not a folder"),
        (["calibrate", "--profiles", "{tmp}", "--samples", "x.csv"], "exactly one of"),
        (["calibrate", "--profiles", "{tmp}"], "isolated_thp.csv: missing"),
        (["calibrate", "--samples", "{tmp}/none.csv"], "file not found"),
        (["simulate", "--trace", str(TRACE), "--policy", "las+spread", "--link-params", "p.json"], "needs --contention link"),
        (["simulate", "--trace", str(TRACE), "--policy", "las+spread", "--contention", "link", "--link-params", "{tmp}/none.json"], "cannot read link parameters"),
    ],
)
def test_bad_calibration_and_link_input_exits_2_with_one_line(capsys, tmp_path, args, needle):
    rc, out, err = run(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert rc == 2
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_malformed_profiles_name_the_folder(capsys, tmp_path):
    (tmp_path / "isolated_thp.csv").write_text(',isol_thp\n"A,2,2",abc\n')
    (tmp_path / "shared_thp_ratio.csv").write_text(',"A,2,2"\n"A,2,2",0.5\n')
    rc, _, err = run(capsys, "calibrate", "--profiles", tmp_path)
    assert rc == 2 and "malformed profiles" in err and str(tmp_path) in err



@pytest.mark.parametrize("isolated, ratios, needle", [
    ('"MoE,2,2",inf\n"FSDP,2,2",50\n', '"MoE,2,2",0.9,0.8\n"FSDP,2,2",0.7,0.95\n', "isolated_thp.csv row 2 (MoE,2,2)"),
    ('"MoE,2,2",-100\n"FSDP,2,2",50\n', '"MoE,2,2",0.9,0.8\n"FSDP,2,2",0.7,0.95\n', "expected a throughput from"),
    ('"MoE,2,2",0\n"FSDP,2,2",50\n', '"MoE,2,2",0.9,0.8\n"FSDP,2,2",0.7,0.95\n', "isolated_thp.csv row 2"),
    ('"MoE,2,2",40\n"FSDP,2,2",50\n', '"MoE,2,2",nan,0.8\n"FSDP,2,2",0.7,0.95\n', "expected ratios in (0, 1]"),
    ('"MoE,2,2",40\n"FSDP,2,2",50\n', '"MoE,2,2",5,0.8\n"FSDP,2,2",0.7,-3\n', "shared_thp_ratio.csv row 2 (MoE,2,2)"),
    ('"MoE,2,2",40\n"FSDP,2,2",50\n', '"MoE,2,2",0.9\n"FSDP,2,2",0.7,0.95\n', "1 ratios for 2 columns"),
])
def test_profiles_out_of_their_domain_are_one_line_before_any_fit(capsys, tmp_path, isolated, ratios, needle):
    """An infinite, negative, zero or NaN measurement was a scipy traceback from the fit
    ("Residuals are not finite"); ratios of 5 or -3 and a ragged table were fitted silently."""
    (tmp_path / "isolated_thp.csv").write_text(",isol_thp\n" + isolated)
    (tmp_path / "shared_thp_ratio.csv").write_text(',"MoE,2,2","FSDP,2,2"\n' + ratios)
    rc, _, err = run(capsys, "calibrate", "--profiles", tmp_path, "--starts", 1, "--folds", 2, "--workers", 1)
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and needle in err and str(tmp_path) in err, err


@pytest.mark.parametrize("value", ["1e-320", "1e308", "inf", "0"])
def test_a_sample_throughput_out_of_its_domain_is_one_line(capsys, tmp_path, value):
    samples = tmp_path / "s.csv"
    samples.write_text(f"model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\nA,2,2,,,,{value}\nA,2,2,B,2,2,5\n")
    rc, _, err = run(capsys, "calibrate", "--samples", samples, "--starts", 1, "--folds", 2, "--workers", 1)
    assert rc == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "field 'samples_per_s': expected a number from 1e-06 to 1e+12" in err, err

SAMPLES = """model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s
A,2,2,,,,10
A,2,2,,,,12
B,4,2,,,,40
A,2,2,B,4,2,5.5
A,2,2,B,4,2,5.5
B,4,2,A,2,2,30
"""


def test_samples_become_profiles():
    catalog = parse_samples(SAMPLES, "s.csv")
    a, b = ProfileKey("A", 2, 2), ProfileKey("B", 4, 2)
    assert catalog.isolated == {a: 11.0, b: 40.0}
    assert catalog.ratios == {(a, b): pytest.approx(0.5), (b, a): pytest.approx(0.75)}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("model,gpus\nA,2\n", "missing column"),
        (SAMPLES + "A,2,2,,,,fast\n", "line 8: field 'samples_per_s'"),
        (SAMPLES + "A,x,2,,,,1\n", "line 8: fields 'gpus' and 'nodes'"),
        (SAMPLES + "A,2,4,,,,1\n", "1 <= nodes <= gpus"),
        (SAMPLES + "C,2,2,A,2,2,1\n", "the victim C,2,2 has no isolated samples"),
        ("model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\nA,2,2,,,,1\n", "no co-located samples"),
    ],
)
def test_bad_samples_name_line_and_field(text, needle):
    with pytest.raises(DeepShareError, match=needle):
        parse_samples(text, "s.csv")


@pytest.mark.slow  # two calibrations, one in 2 worker processes
def test_calibrate_shows_a_line_per_finished_fit_and_keeps_the_serial_answer(capsys, tmp_path):
    """No terminal: one opening line, then one line per fit (full fit, each fold) with its start count."""
    import re

    import numpy as np

    from deepshare.core.workloads import load_profiles

    prof = tmp_path / "prof"
    write_profiles(prof)
    rc, out, err = run(capsys, "calibrate", "--profiles", prof, "--starts", 2, "--folds", 2, "--workers", 1, "--json", "-")
    assert rc == 0, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("fitting ") and "2 cross-validation folds (2 start(s) each" in lines[0]
    assert [re.sub(r", \d+ s\)$", ")", line) for line in lines[1:4]] == [
        "full fit done (2/6 starts)", "fold 1/2 done (4/6 starts)", "fold 2/2 done (6/6 starts)"]
    doc = json.loads(out)
    data = Dataset.from_catalog(load_profiles(prof))
    model = PairModel(data)
    _, fitted = model.predict(model.fit(np.arange(len(data.ratio)), 2, 0))  # the one-call fit, start by start
    assert doc["fit_mae"] == float(np.abs(fitted - data.ratio).mean())
    rc, out2, err2 = run(capsys, "calibrate", "--profiles", prof, "--starts", 2, "--folds", 2, "--workers", 2, "--json", "-")
    assert rc == 0, err2
    assert json.loads(out2) == doc  # workers and finishing order change nothing
    assert {line.split(" done")[0] for line in err2.splitlines() if " done (" in line} == {"full fit", "fold 1/2", "fold 2/2"}
    assert "link model fitted to" in " ".join(err.split())  # with --json -, the tables went to stderr


@pytest.mark.slow  # a calibration fit
def test_calibrate_shows_a_bar_on_a_terminal(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    write_profiles(tmp_path / "prof")
    rc, out, err = run(capsys, "calibrate", "--profiles", tmp_path / "prof", "--starts", 1, "--folds", 2, "--workers", 1)
    assert rc == 0, err
    assert "calibrating:" in err and "3/3 starts" in err
    assert "done (" not in err  # the per-fit lines are for pipes only


SAMPLES_HEADER = "model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\n"


def test_calibrate_refuses_fewer_cells_than_folds_in_one_line(capsys, tmp_path):
    """One measured pair and 5 folds: folds without a test cell gave NaN references and numpy
    warnings; now one line saying what to do."""
    samples = tmp_path / "samples.csv"
    samples.write_text(SAMPLES_HEADER + "MoE,4,2,,,,17.1\nMoE,4,2,FSDP,8,4,7.9\nFSDP,8,4,,,,10\nFSDP,8,4,MoE,4,2,5\n")
    rc, out, err = run(capsys, "calibrate", "--samples", samples, "--starts", 1, "--workers", 1)
    assert rc == 2 and err.strip() == (
        "deepshare: error: 5-fold cross-validation needs at least 5 measured cells (pairs of jobs that shared nodes "
        "or an uplink); these profiles have 2: measure more pairs, or ask for fewer folds (--folds 2)")


@pytest.mark.slow  # a calibration fit
def test_calibrate_with_as_many_folds_as_cells_shows_unmeasured_pairs_as_a_dash(capsys, tmp_path):
    samples = tmp_path / "samples.csv"
    samples.write_text(SAMPLES_HEADER + "MoE,4,2,,,,17.1\nMoE,4,2,FSDP,8,4,7.9\nFSDP,8,4,,,,10\nFSDP,8,4,MoE,4,2,5\n")
    rc, out, err = run(capsys, "calibrate", "--samples", samples, "--folds", 2, "--starts", 1, "--workers", 1)
    assert rc == 0 and "Warning" not in err
    assert "nan" not in out
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in out.splitlines()
            if line.startswith("│ MoE") or line.startswith("│ FSDP")}
    assert rows["MoE"][0] == "-" and rows["FSDP"][1] == "-"  # each model measured beside the other only


def test_a_samples_row_beyond_the_largest_job_is_refused_naming_the_line(tmp_path):
    with pytest.raises(DeepShareError, match=r"s\.csv line 2: expected a model name without control characters and 1 <= nodes <= gpus <= 65,536"):
        parse_samples(SAMPLES_HEADER + "MoE,100000000,2,,,,17.1\n", "s.csv")
