"""Hostile input to ``deepshare calibrate`` and the files it reads and writes (review of
2026-12-07): each is one line naming the file, row or field, exit 2, never a solver's traceback
or a silently wrong fit."""

from __future__ import annotations

import json
import math
import os
import sqlite3

import pytest
from cli_run import cli as run  # (exit status, stdout, stderr)

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.core.json_text import json_text
from deepshare.rl.train import parse_train_config
from deepshare.runtime.journal import Journal
from deepshare.runtime.spec import spec_from_json

KEYS = ["A,2,1", "A,4,2", "B,2,1", "B,4,2"]


def profiles(folder, isolated=None, ratio_rows=None, header=None):  # type: ignore[no-untyped-def]
    """A profiles folder of four keys (``isolated``: its isolated_thp.csv rows; ``ratio_rows``
    and ``header``: shared_thp_ratio.csv's)."""
    isolated = isolated or [f'"{k}",{10 + i}' for i, k in enumerate(KEYS)]
    header = header or KEYS
    ratio_rows = ratio_rows or [f'"{k}",' + ",".join(["0.8"] * len(header)) for k in KEYS]
    (folder / "isolated_thp.csv").write_text(",isol_thp\n" + "\n".join(isolated) + "\n")
    (folder / "shared_thp_ratio.csv").write_text("," + ",".join(f'"{h}"' for h in header) + "\n" + "\n".join(ratio_rows) + "\n")
    return folder


def one_error(capsys, *args):  # type: ignore[no-untyped-def]
    rc, _, err = run(capsys, *args)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("isolated, needle", [
    (['"A,0,0",10'], "isolated_thp.csv row 2 (A,0,0): expected 1 <= nodes <= gpus <= 65,536"),
    (['"A,-2,-1",10'], "isolated_thp.csv row 2: expected a key 'MODEL,GPUS,NODES'"),
    (['"A,2,5",10'], "isolated_thp.csv row 2 (A,2,5): expected 1 <= nodes <= gpus"),
    ([f'"A,{"9" * 400},1",10'], "isolated_thp.csv row 2: expected a key 'MODEL,GPUS,NODES'"),
    (['"A2",10'], "isolated_thp.csv row 2: expected a key 'MODEL,GPUS,NODES'"),
    (['"\x1b[2JA,2,1",10'], "a model name without control characters"),
    (['"A,2,1",abc'], "isolated_thp.csv row 2 (A,2,1): expected a throughput, got 'abc'"),
    (['"A,2,1"'], "isolated_thp.csv row 2: expected '\"MODEL,GPUS,NODES\",throughput', got 1 field"),
    (['"A,2,1",10', '"A,4,2",18', '"A,2,1",99999'], "isolated_thp.csv row 4: A,2,1 is also on row 2; each key once"),
    # a quoted field spanning lines: the row is named by the line it starts on
    (['"A,2,1",10', '"Res\nNet,1,1",abc'], "isolated_thp.csv row 3: expected a key"),
])
def test_a_bad_isolated_row_is_one_line_naming_it(capsys, tmp_path, isolated, needle):
    err = one_error(capsys, "calibrate", "--profiles", profiles(tmp_path, isolated=isolated))
    assert needle in err and "\x1b" not in err


def test_bad_ratio_tables_name_the_row_or_column(capsys, tmp_path):
    folder = profiles(tmp_path, header=["A,2,1", "A,4,2", "B,2,1", "A,2,1"])
    assert "shared_thp_ratio.csv row 1: column 5 (A,2,1) is also column 2; each key once" in one_error(
        capsys, "calibrate", "--profiles", folder)
    rows = [f'"{k}",0.8,0.8,0.8,0.8' for k in ["A,2,1", "A,4,2", "A,2,1"]]
    folder = profiles(tmp_path, ratio_rows=rows)
    assert "shared_thp_ratio.csv row 4 (A,2,1): also on row 2; each victim once" in one_error(
        capsys, "calibrate", "--profiles", folder)
    folder = profiles(tmp_path, ratio_rows=['"A,2,1",0.8,x,0.8,0.8'])
    assert "shared_thp_ratio.csv row 2 (A,2,1): expected ratios in (0, 1], got 'x'" in one_error(
        capsys, "calibrate", "--profiles", folder)
    (tmp_path / "shared_thp_ratio.csv").write_text("\n\n")
    assert "shared_thp_ratio.csv: empty" in one_error(capsys, "calibrate", "--profiles", tmp_path)


SAMPLES_HEADER = "model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s"


def test_a_samples_column_given_twice_is_refused(capsys, tmp_path):
    """A dict row keeps the last of two same-named columns: every throughput was read as the
    second column's 1 and the fit said MAE 0.000."""
    path = tmp_path / "s.csv"
    path.write_text(SAMPLES_HEADER + ",samples_per_s\nA,2,1,,,,100,1\n")
    assert "s.csv line 1: column 'samples_per_s' is given twice" in one_error(capsys, "calibrate", "--samples", path)


def test_a_samples_model_with_a_terminal_escape_is_refused(capsys, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(SAMPLES_HEADER + "\nB\x1b[2J\x07,2,1,,,,100\n")
    err = one_error(capsys, "calibrate", "--samples", path)
    assert "expected a model name without control characters" in err and "\x1b" not in err


def test_link_parameters_with_a_key_given_twice_are_refused(tmp_path):
    from deepshare.core.contention.link.params import LinkCatalog

    with pytest.raises(DeepShareError, match=r"^p.json: the key 'A' is given twice in one object; expected a "
                                             r"link-parameter file with each key once$"):
        LinkCatalog.from_json('{"models": {"A": {}, "A": {}}, "kappa": 1, "sensitivity": 1}', "p.json")


def journal_with_a_run(state, model: str = "DLRM", measured: float = 100.0):  # type: ignore[no-untyped-def]
    journal = Journal(state)
    job = journal.submit(spec_from_json(dict(name="j", gpus=2, model=model, command=["/bin/true"],
                                             checkpoint_dir="/tmp/ckpt")))
    journal.start_run(job.job_id, (("node0", 2),), 10.0)
    journal.record_progress(job.job_id, 1, measured, 10, 5.0, 10.0)
    journal.close()
    return journal


def test_from_state_prints_a_journalled_models_name_escaped(tmp_path, capsys):
    """A job submitted before names refused control characters (the spec itself takes them) put
    a terminal escape on the screen of whoever ran ``calibrate --from-state``."""
    journal_with_a_run(tmp_path / "s", model="Res\x1b[2J")
    assert main(["calibrate", "--from-state", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "Res\\x1b[2J" in out


def test_from_state_skips_throughputs_out_of_bounds(tmp_path, capsys):
    journal_with_a_run(tmp_path / "s")
    db = sqlite3.connect(tmp_path / "s" / "journal.sqlite")
    db.execute("UPDATE runs SET measured_throughput=1e308")
    db.commit()
    db.close()
    journal = Journal(tmp_path / "s")
    assert journal.measurements(10) == []
    journal.close()
    db = sqlite3.connect(tmp_path / "s" / "journal.sqlite")
    db.execute("UPDATE runs SET measured_throughput=1e-7")  # a slow job's real report (0 to 1e12 are taken)
    db.commit()
    db.close()
    journal = Journal(tmp_path / "s")
    assert [m.measured_throughput for m in journal.measurements(10)] == [1e-7]
    journal.close()


def test_from_state_errors_name_the_flag(tmp_path, capsys):
    state = tmp_path / "s"
    state.mkdir()
    (state / "journal.sqlite").write_bytes(os.urandom(4096))
    err = one_error(capsys, "calibrate", "--from-state", state)
    assert err.startswith("deepshare: error: --from-state ") and "is not a journal" in err and "move it away" not in err
    (state / "journal.sqlite").unlink()
    (state / "journal.sqlite").mkdir()
    assert "is not a file (a folder, a pipe or a device)" in one_error(capsys, "calibrate", "--from-state", state)


def test_reports_write_null_for_a_number_that_is_not_finite():
    """``imitate`` with no held-out episode wrote ``NaN`` into imitation.json, which strict JSON
    parsers refuse."""
    text = json_text({"held_out_accuracy": math.nan, "round": [{"x": math.inf}], "obj": object()}, default=lambda o: "obj")
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "held_out_accuracy": None, "round": [{"x": None}], "obj": "obj"}


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "", "x\ny", "a" * 129])
def test_a_config_name_that_is_no_folder_name_is_refused(name):
    """Without --out, a run goes to runs/NAME: ``../../x`` wrote outside runs/."""
    with pytest.raises(DeepShareError, match="name: String should"):
        parse_train_config(json.dumps({"name": name}), "c.yaml")


def two_runs(state):  # type: ignore[no-untyped-def]
    """A journal of two measured DLRM runs (``journal_with_a_run`` twice over)."""
    journal = Journal(state)
    for name in ("a", "b"):
        job = journal.submit(spec_from_json(dict(name=name, gpus=2, model="DLRM", command=["/bin/true"],
                                                 checkpoint_dir="/tmp/ckpt")))
        journal.start_run(job.job_id, (("node0", 2),), 10.0)
        journal.record_progress(job.job_id, 1, 100.0, 10, 5.0, 10.0)
    journal.close()


@pytest.mark.parametrize("column", ["spec", "placement"])
def test_from_state_skips_a_run_whose_text_is_not_utf8(tmp_path, capsys, caplog, column):
    """A journal row edited to hold bytes that are not UTF-8 was a sqlite3.OperationalError
    traceback (the whole query failed: the live refit too); the run is skipped and named."""
    state = tmp_path / "s"
    two_runs(state)
    db = sqlite3.connect(state / "journal.sqlite")
    job = db.execute("SELECT id FROM jobs ORDER BY seq LIMIT 1").fetchone()[0]
    table = "jobs" if column == "spec" else "runs"
    db.execute(f"UPDATE {table} SET {column} = CAST(X'5b22ff225d' AS TEXT) WHERE {'id' if table == 'jobs' else 'job_id'} = ?",
               (job,))
    db.commit()
    db.close()
    out_json = tmp_path / "fit.json"
    rc, _, err = run(capsys, "calibrate", "--from-state", state, "--json", out_json)
    assert rc == 0 and "Traceback" not in err, err
    assert f"{column}: byte 0xff at offset 2 is not UTF-8" in caplog.text
    assert json.loads(out_json.read_text())["runs"] == 1  # the other run still learned from


def test_from_state_a_journal_table_edited_by_hand_is_one_line(tmp_path, capsys):
    """A ``runs`` table without its columns passed the journal check (table names only) and was a
    sqlite3.OperationalError traceback; nothing is written."""
    state = tmp_path / "s"
    two_runs(state)
    db = sqlite3.connect(state / "journal.sqlite")
    db.executescript("DROP TABLE runs; CREATE TABLE runs (x)")
    db.close()
    err = one_error(capsys, "calibrate", "--from-state", state, "--out", tmp_path / "fit.json")
    assert "--from-state" in err and "cannot read the journal's runs (no such column" in err
    assert not (tmp_path / "fit.json").exists()


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("link", [False, True], ids=["file", "symlink"])
def test_from_state_outputs_never_replace_the_journals_wal_or_shm(tmp_path, capsys, suffix, link):
    """The -wal holds a live journal's latest transactions: ``--out STATE/journal.sqlite-wal``
    replaced it, and a scheduler that then crashed lost them. Beside a symlinked journal, SQLite's
    -wal is beside the file it leads to."""
    state = tmp_path / "s"
    two_runs(tmp_path / "real" if link else state)
    if link:
        state.mkdir()
        (state / "journal.sqlite").symlink_to(tmp_path / "real" / "journal.sqlite")
    side = (tmp_path / "real" if link else state) / f"journal.sqlite{suffix}"
    for flag in ("--out", "--json"):
        err = one_error(capsys, "calibrate", "--from-state", state, flag, side)
        assert "is the input --from-state" in err and "would destroy the input" in err
    assert not side.exists()


def test_from_state_says_why_a_journal_it_cannot_open_read_only_is_unread(tmp_path, capsys, monkeypatch):
    """A stopped scheduler's journal where this user cannot create the -wal and -shm that SQLite
    reads a WAL journal through (a read-only mount or snapshot, another user's folder) was
    refused as "not a journal (unable to open database file)"."""
    import deepshare.runtime.journal as journal_module

    state = tmp_path / "s"
    two_runs(state)
    real = os.access
    monkeypatch.setattr(journal_module.os, "access",
                        lambda path, mode, **kw: False if os.path.realpath(path) == os.path.realpath(state) and mode & os.W_OK
                        else real(path, mode, **kw))
    err = one_error(capsys, "calibrate", "--from-state", state)
    assert "not a journal" not in err and "SQLite reads a journal through its -wal and -shm files" in err
    assert sorted(p.name for p in state.iterdir()) == ["journal.sqlite"]
