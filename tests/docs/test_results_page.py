"""Results come from runs (issue 29): the results page and the README's headline table are what
``make results`` renders from the JSON in ``docs/results/``, stamped with each run's date, commit
and machine; a hand edit fails here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from deepshare.core.errors import DeepShareError

from deepshare.experiments import results_page
from deepshare.experiments.results_page import README_END, README_START, main, policy_rows, render_headline

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = {"date": "2026-12-02T10:00:00+00:00", "deepshare": "0.1.0", "commit": {"sha": "a" * 40, "dirty": False},
              "machine": {"system": "Linux 6", "arch": "x86_64", "cpu": "Test CPU", "cpus": 2, "memory_gib": 24.0,
                          "python": "3.11", "load_average": 0.5}, "command": ["deepshare", "evaluate", "--suite", "quick"]}


def _cell(best: str, results: dict[str, float], bound: float, pooled: float) -> dict:
    return {"best_heuristic": best, "jct_bound_s": bound, "pooled_ideal_s": pooled,
            "results": {p: {"avg_jct_s": v} for p, v in results.items()}}


def _suite() -> dict:
    cells = [_cell("h1", {"h1": 100.0, "h2": 120.0, "rl": 90.0}, 50.0, 80.0),
             _cell("h2", {"h1": 220.0, "h2": 200.0, "rl": 210.0}, 100.0, 150.0)]
    return {"suite": {"name": "quick", "learned": ["rl"]}, "cells": cells, "heuristic_wins": {"h1": 1, "h2": 1},
            "summary": {"rl": {"cells_won": 1}}, "provenance": PROVENANCE,
            "room": {"geomean_room": 0.5, "min_room": 0.5, "max_room": 0.5, "geomean_best_over_pooled": 1.29,
                     "max_best_over_pooled": 1.33}}


def test_policy_rows_are_ratios_to_each_cells_best_heuristic() -> None:
    rows = {r["policy"]: r for r in policy_rows(_suite())}
    assert rows["rl"]["geomean"] == pytest.approx(math.sqrt(0.9 * 1.05)) and rows["rl"]["worst"] == pytest.approx(1.05)
    assert rows["h1"]["geomean"] == pytest.approx(math.sqrt(1.0 * 1.1)) and rows["h1"]["won"] == 1
    assert rows["rl"]["over_bound"] == pytest.approx(math.sqrt(1.8 * 2.1)) and rows["rl"]["learned"]
    assert [r["policy"] for r in policy_rows(_suite())] == ["rl", "h1", "h2"]


def test_generation_stamps_the_run_and_check_catches_a_hand_edit(tmp_path: Path) -> None:
    runs = tmp_path / "runs" / "suite"
    runs.mkdir(parents=True)
    (runs / "quick.json").write_text(json.dumps(_suite()))
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{README_START}\nold figures\n{README_END}\n\nrest\n")
    args = ["--suites", str(runs), "--data", str(tmp_path / "data"), "--page", str(tmp_path / "results.md"),
            "--readme", str(readme), "--demo", str(tmp_path / "no-demo")]
    assert main(args) == 0
    page, text = (tmp_path / "results.md").read_text(), readme.read_text()
    assert "### `quick` (2 cells)" in page and "`aaaaaaaaaaaa`" in page and "2 x Test CPU" in page
    assert "run 2026-12-02 10:00:00 UTC" in page and "load average 0.5 at start" in page
    assert "old figures" not in text and "| `rl` | 0.972 | 1.050 | 1 |" in text and text.endswith("\n\nrest\n")
    assert (tmp_path / "data" / "suite" / "quick.json").is_file()
    assert main([*args, "--check"]) == 0
    (tmp_path / "results.md").write_text(page.replace("0.972", "0.950"))  # a figure typed in by hand
    assert main([*args, "--check"]) == 1


def test_a_broken_file_never_replaces_good_data(tmp_path: Path) -> None:
    source, target = tmp_path / "in", tmp_path / "data" / "suite"
    source.mkdir()
    target.mkdir(parents=True)
    (target / "quick.json").write_text('{"cells": []}')
    (source / "quick.json").write_text("{not json")
    with pytest.raises(DeepShareError, match="quick.json: expected a JSON report"):
        results_page.main(["--suites", str(source), *_page_args(tmp_path)])
    assert (target / "quick.json").read_text() == '{"cells": []}'


def test_a_bad_bench_report_or_kept_report_leaves_every_file_as_it_was(tmp_path: Path) -> None:
    """Suites and benchmarks are all checked, and the page rendered, before the first copy."""
    suites, bench = tmp_path / "suites", tmp_path / "bench"
    suites.mkdir()
    bench.mkdir()
    (suites / "quick.json").write_text('{"cells": [], "new": 1}')
    (bench / "b.json").write_text('{"cells": []}')  # a suite report among the benchmarks'
    kept = tmp_path / "data" / "suite"
    kept.mkdir(parents=True)
    (kept / "quick.json").write_text('{"cells": []}')
    args = _page_args(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    with pytest.raises(DeepShareError, match="b.json: not a benchmark report"):
        results_page.main(["--suites", str(suites), "--bench", str(bench), *args])
    assert (kept / "quick.json").read_text() == '{"cells": []}' and not (tmp_path / "results.md").exists()
    (bench / "b.json").unlink()
    (tmp_path / "data" / "bench").mkdir()
    (tmp_path / "data" / "bench" / "old.json").write_text("[]")  # a kept report gone bad
    with pytest.raises(DeepShareError, match="old.json: not a benchmark report"):
        results_page.main(["--suites", str(suites), *args])
    assert (kept / "quick.json").read_text() == '{"cells": []}' and (tmp_path / "README.md").read_text() == readme


def _page_args(tmp_path: Path) -> list[str]:
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{results_page.README_START}\n{results_page.README_END}\n")
    return ["--data", str(tmp_path / "data"), "--page", str(tmp_path / "results.md"), "--readme", str(readme),
            "--demo", str(tmp_path / "no-demo")]


def test_a_report_of_another_kind_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "a.json").write_text('{"cells": []}')
    (suites / "b.json").write_text('{"report": {"avg_jct_s": 1}}')  # a `simulate --json`
    with pytest.raises(DeepShareError, match="b.json: not a suite report"):
        results_page.main(["--suites", str(suites), *_page_args(tmp_path)])
    assert not (tmp_path / "data").exists()


def test_a_readme_without_markers_or_the_readme_as_page_is_one_line(tmp_path: Path) -> None:
    args = _page_args(tmp_path)
    (tmp_path / "README.md").write_text("no markers here\n")
    with pytest.raises(DeepShareError, match="README.md: expected the markers"):
        results_page.main(args)
    readme = str(tmp_path / "README.md")
    with pytest.raises(DeepShareError, match="is also --readme"):
        results_page.main([*args[:2], "--page", readme, "--readme", readme])


def test_a_report_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    suites, data = tmp_path / "suites", tmp_path / "data" / "suite"
    suites.mkdir()
    data.mkdir(parents=True)
    report = (ROOT / "docs" / "results" / "suite" / "quick.json").read_text()
    (suites / "tiny.json").write_text(report)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (data / "tiny.json").symlink_to(victim)
    assert results_page.main(["--suites", str(suites), *_page_args(tmp_path)]) == 0
    assert victim.read_text() == "mine" and not (data / "tiny.json").is_symlink()
    assert (data / "tiny.json").read_text() == report


def test_a_report_of_the_right_key_but_the_wrong_shape_is_one_line(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "tiny.json").write_text('{"cells": []}')  # no suite name, no policies
    with pytest.raises(DeepShareError, match="a report lacks what the page shows"):
        results_page.main(["--suites", str(suites), *_page_args(tmp_path)])
    assert not (tmp_path / "data").exists()


def test_no_suite_yet_says_how_to_make_one() -> None:
    assert "make suites" in render_headline({})


def test_the_committed_results_page_and_readme_match_their_data() -> None:
    """docs/results.md and README.md's headline block are exactly what docs/results/ gives."""
    assert main(["--check", "--data", str(ROOT / "docs" / "results"), "--page", str(ROOT / "docs" / "results.md"),
                 "--readme", str(ROOT / "README.md")]) == 0


def _model_cell(durations: str, best: str, jct: float, cost: float | None) -> dict:
    return {"load": 1.0, "mix": "heavy", "nodes": 2, "gpus_per_node": 8, "contention": "profiled", "seed": 2**31 + 1,
            "contention_knowledge": "exact", "durations": durations, "best_heuristic": best, "best_avg_jct_s": jct,
            "cost_of_not_knowing": cost, "results": {}}


def test_a_suite_under_several_information_models_gets_its_by_model_tables() -> None:
    from deepshare.experiments.results_information import information_headline, information_section

    doc = {"suite": {"learned": ["rl"]}, "seed_base": 2**31,
           "cells": [_model_cell("exact", "srsf+packed", 1000.0, None), _model_cell("unknown", "las+packed", 1250.0, 1.25)],
           "summary_by_durations": {"exact": {"rl": {"geomean_avg_jct_ratio": 1.01, "worst_avg_jct_ratio": 1.02}},
                                    "unknown": {"rl": {"geomean_avg_jct_ratio": 0.9, "worst_avg_jct_ratio": 0.95}}},
           "cost_of_not_knowing": {"unknown": {"geomean": 1.25, "max": 1.25}}}
    section = information_section(doc)
    assert "| policy | exact | unknown |" in section
    assert "| `rl` | 1.010 (1.020) | 0.900 (0.950) |" in section
    assert "| cost of not knowing (best heuristic / best `exact` one) | 1 | 1.250 (1.250) |" in section
    assert ("| load 1 heavy 2x8 profiled seed 1 | `srsf+packed` 1,000 s | `las+packed` 1,250 s (x1.250) |" in section)
    assert "| `rl` | 1.010 (1.020) | 0.900 (0.950) |" in information_headline(doc)
    one_model = {**doc, "cells": doc["cells"][:1]}
    assert information_section(one_model) == [] and information_headline(one_model) == []


def test_a_suite_learning_contention_gets_its_exact_against_learned_table() -> None:
    from deepshare.experiments.results_information import knowledge_section

    def cell(knowledge: str, mix: str, best: str, jct: float, over_exact: dict | None) -> dict:
        return {**_model_cell("exact", best, jct, None), "mix": mix, "contention_knowledge": knowledge,
                "learned_over_exact": over_exact}

    doc = {"suite": {"learned": []}, "seed_base": 2**31, "cells": [
        cell("exact", "heavy", "h1", 1000.0, None), cell("learned", "heavy", "h1", 1010.0, {"h1": 1.01, "h2": 0.99}),
        cell("exact", "random", "h1", 2000.0, None), cell("learned", "random", "h2", 1960.0, {"h1": 1.05, "h2": 0.97})]}
    section = knowledge_section(doc)
    assert "| load 1 heavy 2x8 profiled seed 1 | `h1` 1,000 s | same, 1,010 s | 1.010 | 1.010 |" in section
    assert "| load 1 random 2x8 profiled seed 1 | `h1` 2,000 s | `h2` 1,960 s | 0.980 | 1.050 |" in section
    assert knowledge_section({**doc, "cells": doc["cells"][::2]}) == []  # contention known exactly only


def test_a_suite_running_migration_gets_each_variant_over_its_base() -> None:
    from deepshare.experiments.results_migration import migration_section

    doc = {"cells": [
        {"results": {"a": {"avg_jct_s": 100.0}, "a+migrate": {"avg_jct_s": 90.0}, "b+migrate": {"avg_jct_s": 1.0}}},
        {"results": {"a": {"avg_jct_s": 200.0}, "a+migrate": {"avg_jct_s": 220.0}, "b+migrate": {"avg_jct_s": 1.0}}}]}
    section = migration_section(doc)
    assert f"| `a+migrate` | {math.sqrt(0.9 * 1.1):.3f} | 0.900-1.100 | 2 |" in section
    assert not any("b+migrate" in line for line in section)  # no base: no row
    assert migration_section({"cells": [{"results": {"a": {"avg_jct_s": 1.0}}}]}) == []
    assert "Migration:" not in results_page.suite_section("quick", _suite())


def test_a_migration_pair_with_a_failed_run_leaves_that_cell_out_and_counts_it() -> None:
    """A failed run has no figure (``avg_jct_s`` None): the page is still written."""
    from deepshare.experiments.results_migration import migration_section

    failed = {"avg_jct_s": None, "error": "RuntimeError: boom"}
    doc = {"cells": [
        {"results": {"a": {"avg_jct_s": 100.0}, "a+migrate": failed, "b": failed, "b+migrate": {"avg_jct_s": 1.0}}},
        {"results": {"a": {"avg_jct_s": 200.0}, "a+migrate": {"avg_jct_s": 220.0}, "b": failed, "b+migrate": failed}}]}
    section = migration_section(doc)
    assert "| `a+migrate` | 1.100 | 1.100-1.100 | 1 (1 failed) |" in section
    assert "| `b+migrate` | - | - | 0 (2 failed) |" in section


def test_a_suite_with_tenants_shows_its_fairness_tradeoff() -> None:
    doc = _suite()
    assert "trade-off" not in results_page.suite_section("quick", doc)  # no tenants: no table
    doc["tradeoff"] = {"cells": 2, "fronts": {"worst_rho": ["h1"], "share_rho_above_1": ["h1", "h2"]},
                       "policies": {"h2": {"jct_ratio": 1.05, "worst_rho": 3.0, "share_rho_above_1": 0.5,
                                           "max_share_gap": 0.02, "worst_queue_avg_queue_s": 15762.4},
                                    "h1": {"jct_ratio": 1.0, "worst_rho": 2.5, "share_rho_above_1": 0.6,
                                           "max_share_gap": None, "worst_queue_avg_queue_s": 100.0}}}
    lines = results_page.suite_section("quick", doc).splitlines()
    start = lines.index("| policy | avg JCT / fastest | worst rho | rho > 1 | max share gap | worst queue avg wait (s) |")
    assert "over 2 cells" in lines[start - 2]
    assert lines[start + 2:start + 4] == ["| `h1` | 1.000 | 2.500 * | 0.600 * | - | 100 |",
                                          "| `h2` | 1.050 | 3.000 | 0.500 * | 0.020 | 15,762 |"]


@pytest.mark.parametrize("error", [ZeroDivisionError("division by zero"), ValueError("math domain error")])
def test_a_report_whose_numbers_break_the_page_is_one_line(tmp_path: Path, monkeypatch, error) -> None:
    """A report with a zero or negative average JCT: the page's ratios and logs fail; one line."""
    def render(*_):
        raise error

    monkeypatch.setattr(results_page, "render_page", render)
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "quick.json").write_text((ROOT / "docs" / "results" / "suite" / "quick.json").read_text())
    with pytest.raises(DeepShareError, match="a report lacks what the page shows"):
        results_page.main(["--suites", str(suites), *_page_args(tmp_path)])
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("folder", "doc", "text", "where"), [
    ("suites", "suite", '"avg_jct_s": NaN', "cells.1.results.rl.avg_jct_s is NaN"),
    ("suites", "suite", '"avg_jct_s": -Infinity', "cells.1.results.rl.avg_jct_s is -Infinity"),
    ("suites", "suite", '"avg_jct_s": 1e400', "cells.1.results.rl.avg_jct_s is 1e400"),
    ("bench", "bench", '"value": Infinity', "measures.0.value is Infinity"),
    # an integer no float holds: "a report lacks what the page shows (OverflowError ...)", no field named
    ("bench", "bench", '"value": 1' + "0" * 400, "measures.0.value is 10000000000000000000..."),
    ("suites", "suite", '"avg_jct_s": -1' + "0" * 5000, "cells.1.results.rl.avg_jct_s is -1000000000000000000..."),
])
def test_a_report_holding_nan_or_infinity_is_one_line_naming_where(tmp_path: Path, folder, doc, text, where) -> None:
    """deepshare never writes a non-finite number: one in a report is corruption, never a figure
    the page prints as ``nan`` or ``inf``."""
    source = tmp_path / folder
    source.mkdir()
    if doc == "suite":  # the second cell's `rl` run: 210 s in the good file
        body = json.dumps(_suite()).replace('"avg_jct_s": 210.0', text)
    else:
        body = json.dumps({"bench": "b", "measures": [{"name": "m", "value": 1.5, "unit": "s"}]}).replace('"value": 1.5', text)
    assert text in body
    (source / "r.json").write_text(body)
    with pytest.raises(DeepShareError) as error:
        results_page.main([f"--{folder}", str(source), *_page_args(tmp_path)])
    assert str(error.value).startswith(f"{source / 'r.json'}: {where}, not a finite number: a report holds finite "
                                       "numbers only (the file was corrupted or edited by hand)")
    assert not (tmp_path / "data").exists() and not (tmp_path / "results.md").exists()


def _keyed_suite() -> dict:
    """:func:`_suite` with each cell's scenario, as `deepshare evaluate --suite --json` writes it."""
    doc = _suite()
    for cell, load in zip(doc["cells"], (0.5, 1.0)):
        cell.update(load=load, mix="heavy", nodes=2, gpus_per_node=8, contention="profiled", seed=2**31 + 1,
                    durations="exact", contention_knowledge="exact", best_avg_jct_s=cell["results"][cell["best_heuristic"]]["avg_jct_s"])
    return doc


def _broken(edit) -> dict:
    doc = _keyed_suite()
    edit(doc["cells"][1])
    return doc


CELL_1 = " (the cell load 1 heavy 2x8 profiled seed 1 exact)"


@pytest.mark.parametrize(("doc", "says"), [
    (_broken(lambda c: c.update(durations="exactt")),
     "cells.1.durations: 'exactt' is none of exact, estimated, unknown (the cell load 1 heavy 2x8 profiled seed 1 exactt)"),
    (_broken(lambda c: c.update(contention_knowledge="guessed")),
     "cells.1.contention_knowledge: 'guessed' is none of exact, learned (the cell load 1 heavy 2x8 profiled seed 1 "
     "exact+guessed)"),
    (_broken(lambda c: c["results"]["rl"].update(avg_jct_s=-5.0)),
     f"cells.1.results.rl.avg_jct_s: -5.0 is not a positive number or null{CELL_1}"),
    (_broken(lambda c: c["results"]["rl"].update(avg_jct_s=0)),
     f"cells.1.results.rl.avg_jct_s: 0 is not a positive number or null{CELL_1}"),
    (_broken(lambda c: c["results"]["h1"].update(p99_jct_s="300")),
     f"cells.1.results.h1.p99_jct_s: '300' is not a positive number or null{CELL_1}"),
    (_broken(lambda c: c.update(best_avg_jct_s=-1.0)), f"cells.1.best_avg_jct_s: -1.0 is not a positive number or null{CELL_1}"),
    (_broken(lambda c: c.update(jct_bound_s=True)), f"cells.1.jct_bound_s: True is not a positive number or null{CELL_1}"),
    (_broken(lambda c: c["results"].pop("rl")), f"cells.1.results: no run of 'rl' (other cells have one){CELL_1}"),
    (_broken(lambda c: c.update(best_heuristic="h3")), f"cells.1.best_heuristic: 'h3' did not run in this cell{CELL_1}"),
    (_broken(lambda c: c.pop("load")), "cells.1: no 'load' (other cells have one)"),
    ({**_keyed_suite(), "cells": {"a": 1}}, "cells: expected a list of cells (mappings), got {'a': 1}"),
])
def test_a_malformed_suite_report_is_one_line_naming_the_file_the_cell_and_the_field(tmp_path: Path, doc, says) -> None:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "good.json").write_text(json.dumps(_keyed_suite()))
    (suites / "r.json").write_text(json.dumps(doc))
    with pytest.raises(DeepShareError) as error:
        results_page.main(["--suites", str(suites), *_page_args(tmp_path)])
    assert str(error.value) == f"{suites / 'r.json'}: {says}; expected the --json of `deepshare evaluate --suite`"
    assert not (tmp_path / "data").exists() and not (tmp_path / "results.md").exists()


def test_a_kept_report_the_page_cannot_render_is_named_by_its_file(tmp_path: Path) -> None:
    """The new reports are good; the one already kept in the data folder lacks its suite: the
    line names that file, not "a report"."""
    suites, kept = tmp_path / "suites", tmp_path / "data" / "suite"
    suites.mkdir()
    kept.mkdir(parents=True)
    (suites / "quick.json").write_text(json.dumps(_keyed_suite()))
    (kept / "old.json").write_text(json.dumps({k: v for k, v in _keyed_suite().items() if k != "suite"}))
    with pytest.raises(DeepShareError) as error:
        results_page.main(["--suites", str(suites), *_page_args(tmp_path)])
    assert str(error.value) == (f"{kept / 'old.json'}: a report lacks what the page shows (KeyError: \"'suite'\"); "
                                "expected the --json of `deepshare evaluate --suite` or of a bench/ script")
    assert not (kept / "quick.json").exists() and not (tmp_path / "results.md").exists()
