"""A training run's suite learning curve: the same numbers as `deepshare evaluate --suite`, the
heuristics run once, rows appended, and the figure drawn from whatever rows exist."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.experiments import learning_curve
from deepshare.experiments.learning_curve import CURVE_COLUMNS, CURVE_FILE, PLOT_FILE, SuiteCurve, plot_curves
from deepshare.experiments.suite import load_suite, run_suite

POLICIES = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "policies"
DAGGER = POLICIES / "rl_base_dagger.pt"
PPO = POLICIES / "rl_base.pt"


@pytest.fixture(scope="module")
def curve():
    return SuiteCurve("tiny", "rl-base")


@pytest.mark.parametrize("policy_file", [DAGGER, PPO])
def test_a_score_is_what_the_suite_runner_says_for_the_same_file(curve, policy_file):
    name = f"rl-base={policy_file}"
    spec = load_suite("tiny").model_copy(update={"learned": (name,)})
    assert curve.score(policy_file) == run_suite(spec).summary(name)


def test_the_heuristics_run_once_then_only_the_learned_policy(monkeypatch, tmp_path):
    calls = []
    real = learning_curve.run_policies

    def counting(spec, grid, policies, *args, **kwargs):
        calls.append(tuple(policies))
        return real(spec, grid, policies, *args, **kwargs)

    monkeypatch.setattr(learning_curve, "run_policies", counting)
    curve = SuiteCurve("tiny", "rl-base")
    for iteration in (0, 5):
        curve.record(tmp_path, iteration, {"env_steps_lifetime": 100.0 * iteration, "episode_return_mean": -1.5}, DAGGER)
    heuristics = tuple(load_suite("tiny").heuristics)
    copies = [tmp_path / "curve" / "iter_0000.pt", tmp_path / "curve" / "iter_0005.pt"]
    assert calls == [heuristics, (f"rl-base={copies[0]}",), (f"rl-base={copies[1]}",)]  # each scored as kept
    assert all(copy.read_bytes() == DAGGER.read_bytes() for copy in copies)
    umask = os.umask(0)
    os.umask(umask)
    assert {copy.stat().st_mode & 0o777 for copy in copies} == {0o666 & ~umask}  # a normal file, not mkstemp's 0600
    rows = list(csv.DictReader((tmp_path / CURVE_FILE).open()))
    assert [r["iteration"] for r in rows] == ["0", "5"] and list(rows[0]) == list(CURVE_COLUMNS)
    assert [r["policy_file"] for r in rows] == ["curve/iter_0000.pt", "curve/iter_0005.pt"]
    assert rows[1]["env_steps_lifetime"] == "500.0" and rows[0]["suite"] == "tiny" and rows[0]["policy"] == "rl-base"
    assert rows[0]["geomean_avg_jct_ratio"] == rows[1]["geomean_avg_jct_ratio"]  # the same file scores the same
    assert int(rows[0]["cells"]) == 4 and (tmp_path / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # 2 scenarios x exact, estimated
    summary = curve.score(DAGGER)  # the row carries the summary's distance to the bound and the pooled ideal
    for key in ("geomean_avg_jct_over_bound", "geomean_avg_jct_over_pooled"):
        assert summary[key] is not None and float(rows[0][key]) == pytest.approx(summary[key])


def test_a_bad_suite_is_refused_before_anything_runs():
    with pytest.raises(DeepShareError, match="neither a bundled suite"):
        SuiteCurve("nope", "rl-base")


def test_the_figure_needs_some_rows(tmp_path):
    assert plot_curves(tmp_path) is None
    (tmp_path / "metrics.csv").write_text("iteration,episode_return_mean,other\n1,-2.5,x\n2,-2.0,y\n")
    assert plot_curves(tmp_path) == tmp_path / PLOT_FILE  # the return alone, before any suite row


def test_an_overwritten_policy_file_is_scored_anew(curve, tmp_path):
    """Training rewrites one policy.pt at every checkpoint: each score reads the file as it is."""
    import shutil

    target = tmp_path / "policy.pt"
    scores = []
    for source in (DAGGER, PPO):
        shutil.copyfile(source, target)
        scores.append(curve.score(target)["geomean_avg_jct_ratio"])
    assert scores == [curve.score(DAGGER)["geomean_avg_jct_ratio"], curve.score(PPO)["geomean_avg_jct_ratio"]]
    assert scores[0] != scores[1]


def test_a_curve_begun_with_fewer_columns_gains_them(curve, tmp_path):
    """A run resumed by a newer version adds the columns the file lacks, after its own."""
    old = [c for c in CURVE_COLUMNS if c != "policy_file"]
    (tmp_path / CURVE_FILE).write_text(",".join(old) + "\n")
    curve.record(tmp_path, 3, None, DAGGER)
    with (tmp_path / CURVE_FILE).open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == [*old, "policy_file"] and len(rows) == 2 and len(rows[1]) == len(CURVE_COLUMNS)
    assert rows[1][0] == "3" and rows[1][-1] == "curve/iter_0003.pt"


def test_a_point_scored_on_fewer_cells_is_recorded_as_such_and_not_joined_to_the_others(tmp_path, monkeypatch):
    """A checkpoint whose runs failed on some cells is scored on the others: its row counts them
    (``failed_cells``), and the plot draws it apart from the points over every cell."""
    curve = SuiteCurve("tiny", "rl-base")
    whole = {key: 1.0 for key in CURVE_COLUMNS[5:-1]} | {"worst_avg_cell": "c", "worst_p99_cell": "c", "failed_cells": 0}
    summaries = iter([whole, whole | {"geomean_avg_jct_ratio": 0.5, "cells": 1, "failed_cells": 3}, whole])
    monkeypatch.setattr(curve, "score", lambda _file: next(summaries))
    monkeypatch.setattr(learning_curve, "plot_curves", lambda _dir: None)
    for iteration in (1, 2, 3):
        curve.record(tmp_path, iteration, None, DAGGER)
    rows = list(csv.DictReader((tmp_path / CURVE_FILE).open()))
    assert [r["failed_cells"] for r in rows] == ["0", "3", "0"]
    complete, partial = learning_curve.complete_points(rows)
    assert [p["iteration"] for p in complete] == [1.0, 3.0]
    assert partial == [{"iteration": 2.0, "geomean_avg_jct_ratio": 0.5}]
    old = [{k: v for k, v in r.items() if k != "failed_cells"} for r in rows]  # a file begun before the column
    assert [p["iteration"] for p in learning_curve.complete_points(old)[0]] == [1.0, 2.0, 3.0]
    assert plot_curves(tmp_path) == tmp_path / PLOT_FILE


def test_a_resumed_run_scored_on_another_suite_is_refused_before_its_rows_join_the_curve(tmp_path, monkeypatch):
    """``train --resume DIR --eval-suite OTHER`` appended OTHER's ratios to the curve, drawn as one
    line with the first suite's: a change of suite looked like a gain from training."""
    monkeypatch.setattr(learning_curve, "plot_curves", lambda _dir: None)
    summaries = iter([1.30, 1.20, 1.10])

    def scored(curve):
        monkeypatch.setattr(curve, "score", lambda _file: {key: 0 for key in CURVE_COLUMNS}
                            | {"geomean_avg_jct_ratio": next(summaries)})
        return curve

    tiny = scored(SuiteCurve("tiny", "rl-base"))
    for iteration in (1, 2):
        tiny.record(tmp_path, iteration, None, DAGGER)
    path = tmp_path / CURVE_FILE
    before = path.read_text()
    quick = scored(SuiteCurve("quick", "rl-base"))
    with pytest.raises(DeepShareError) as error:
        quick.record(tmp_path, 3, None, DAGGER)
    assert str(error.value) == (
        f"--eval-suite quick: {path} holds this run's learning curve on suite 'tiny'; one curve is scored on one "
        "suite, or its ratios would be drawn as one line: give --eval-suite the suite it was scored on, or move "
        "suite_curve.csv away to start a new curve")
    edited = tmp_path / "tiny.yaml"  # the same name, another grid
    edited.write_text((POLICIES.parent / "suites" / "tiny.yaml").read_text().replace("seeds: 1", "seeds: 2"))
    with pytest.raises(DeepShareError, match=rf"on another suite named 'tiny' \(fingerprint {tiny.fingerprint}, now "
                                             r"[0-9a-f]{16}: the suite file or its tenants file was changed, or the "
                                             r"suite's definition changed with this version of deepshare"):
        scored(SuiteCurve(str(edited), "rl-base")).record(tmp_path, 3, None, DAGGER)
    assert path.read_text() == before and not (tmp_path / "curve" / "iter_0003.pt").exists()
    tiny.record(tmp_path, 3, None, DAGGER)  # the same suite again: the curve goes on
    rows = list(csv.DictReader(path.open()))
    assert [(r["iteration"], r["suite"], r["geomean_avg_jct_ratio"]) for r in rows] == [
        ("1", "tiny", "1.3"), ("2", "tiny", "1.2"), ("3", "tiny", "1.1")]
    assert {r["suite_spec"] for r in rows} == {tiny.fingerprint} == {learning_curve.suite_fingerprint(load_suite("tiny"))}


def test_a_curve_begun_before_the_fingerprint_is_checked_by_the_suites_name(tmp_path, monkeypatch):
    monkeypatch.setattr(learning_curve, "plot_curves", lambda _dir: None)
    old = [c for c in CURVE_COLUMNS if c != "suite_spec"]
    (tmp_path / CURVE_FILE).write_text(",".join(old) + "\n" + ",".join("tiny" if c == "suite" else "1" for c in old) + "\n")
    quick = SuiteCurve("quick", "rl-base")
    monkeypatch.setattr(quick, "score", lambda _file: pytest.fail("scored a suite the curve was not scored on"))
    with pytest.raises(DeepShareError, match="learning curve on suite 'tiny'"):
        quick.record(tmp_path, 2, None, DAGGER)


def test_a_curve_begun_before_the_fingerprint_gains_the_column_on_resume(tmp_path, monkeypatch):
    """Appends kept the old header, so the resumed rows' fingerprint was dropped and a later resume
    on an edited file of the same name was accepted for good: the docs said it "is refused"."""
    monkeypatch.setattr(learning_curve, "plot_curves", lambda _dir: None)
    old = [c for c in CURVE_COLUMNS if c != "suite_spec"]
    path = tmp_path / CURVE_FILE
    path.write_text(",".join(old) + "\r\n" + ",".join("tiny" if c == "suite" else "1" for c in old) + "\r\n\r\n")
    tiny = SuiteCurve("tiny", "rl-base")
    monkeypatch.setattr(tiny, "score", lambda _file: {key: 0 for key in CURVE_COLUMNS})
    tiny.record(tmp_path, 2, None, DAGGER)
    rows = list(csv.DictReader(path.open(newline="")))
    assert list(rows[0]) == list(CURVE_COLUMNS)
    assert [(r["iteration"], r["suite_spec"]) for r in rows] == [("1", ""), ("2", tiny.fingerprint)]
    edited = tmp_path / "tiny.yaml"
    edited.write_text((POLICIES.parent / "suites" / "tiny.yaml").read_text().replace("seeds: 1", "seeds: 2"))
    with pytest.raises(DeepShareError, match="another suite named 'tiny'"):
        SuiteCurve(str(edited), "rl-base").check_continues(tmp_path)


def test_a_curve_with_a_row_longer_than_its_header_is_not_rewritten(tmp_path):
    """Its extra cells would land in the columns added."""
    old = [c for c in CURVE_COLUMNS if c != "suite_spec"]
    path = tmp_path / CURVE_FILE
    path.write_text(",".join(old) + "\r\n" + ",".join(["1"] * (len(old) + 1)) + "\r\n")
    before = path.read_text()
    assert learning_curve.add_columns(path, old) == old and path.read_text() == before


def test_a_suite_keeps_its_fingerprint_when_a_version_adds_a_suite_field(tmp_path, monkeypatch):
    """Every field, defaults included, was hashed: a deepshare that added a suite-format field (with
    its default) changed every suite's fingerprint, and ``train --resume --eval-suite X`` was
    refused though X had not changed."""
    from pydantic import Field

    from deepshare.experiments.suite_spec import SuiteSpec

    class Newer(SuiteSpec):
        a_new_field: int = Field(0, ge=0)

    tiny = load_suite("tiny")
    newer = Newer(**tiny.model_dump())
    assert learning_curve.suite_fingerprint(newer) == learning_curve.suite_fingerprint(tiny)
    assert learning_curve.suite_fingerprint(newer.model_copy(update={"a_new_field": 1})) != \
        learning_curve.suite_fingerprint(tiny)
    assert learning_curve.suite_fingerprint(tiny.model_copy(update={"learned": ("rl-base",)})) == \
        learning_curve.suite_fingerprint(tiny)  # the curve scores its own policy in its place
    assert learning_curve.suite_fingerprint(tiny.model_copy(update={"seeds": 2})) != learning_curve.suite_fingerprint(tiny)


def test_a_suites_tenants_are_fingerprinted_by_the_files_content_not_the_name_written(tmp_path):
    """``tenants: four-teams`` and the path of the same file gave two fingerprints (a resume naming
    the other was refused), while an edited tenants file at the same path kept its fingerprint."""
    bundled = POLICIES.parent / "tenants" / "four-teams.yaml"
    suite = (POLICIES.parent / "suites" / "tenants.yaml").read_text()
    copy = tmp_path / "teams.yaml"
    copy.write_text("# a copy, comments and all\n" + bundled.read_text())
    by_path = tmp_path / "by_path.yaml"
    by_path.write_text(suite.replace("tenants: four-teams", f"tenants: {copy}"))
    named = learning_curve.suite_fingerprint(load_suite("tenants"))
    assert learning_curve.suite_fingerprint(load_suite(str(by_path))) == named
    copy.write_text(bundled.read_text().replace("nominal_gpus: 48", "nominal_gpus: 40", 1))
    assert learning_curve.suite_fingerprint(load_suite(str(by_path))) != named


def test_rows_fingerprinted_as_first_written_still_continue(tmp_path, monkeypatch):
    """A curve begun while the fingerprint hashed every field is not refused on resume for that."""
    monkeypatch.setattr(learning_curve, "plot_curves", lambda _dir: None)
    tiny = SuiteCurve("tiny", "rl-base")
    legacy = learning_curve.legacy_fingerprint(load_suite("tiny"))
    assert legacy != tiny.fingerprint
    path = tmp_path / CURVE_FILE
    path.write_text(",".join(CURVE_COLUMNS) + "\n"
                    + ",".join({"suite": "tiny", "suite_spec": legacy}.get(c, "1") for c in CURVE_COLUMNS) + "\n")
    tiny.check_continues(tmp_path)
    path.write_text(path.read_text().replace(legacy, "0123456789abcdef"))
    with pytest.raises(DeepShareError, match="another suite named 'tiny' \\(fingerprint 0123456789abcdef"):
        tiny.check_continues(tmp_path)
