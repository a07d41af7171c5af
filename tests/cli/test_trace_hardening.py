"""``deepshare trace``: a ``--mix`` model name a canonical trace cannot hold is refused naming
``--mix``; a canonical trace whose names break a line is refused naming the line and the field,
as the writer refuses them; and the commands' lines are never wrapped when piped."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.core.errors import DeepShareError
from deepshare.core.traces import load, parse_mix, write_canonical
from deepshare.core.traces.mixes import MAX_FLAG_NAME_CHARS

HEADER = "job_id,submit_time,model,gpus,duration_s,total_samples"


@pytest.fixture(autouse=True)
def _plain_console(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "NO_COLOR", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


# -- 6: --mix model names are ones a canonical trace holds -------------------------------------------
@pytest.mark.parametrize("command", ["generate", "stats"])
@pytest.mark.parametrize(("mix", "needle"), [
    ("a\nb:1", "model 'a\\nb': expected a name of 1-256 characters on one line"),
    ("MoE:1,x\ry:2", "model 'x\\ry': expected a name of 1-256 characters on one line"),
    ("a\x00b:1", "model 'a\\x00b': expected"),
    ("m" * (MAX_FLAG_NAME_CHARS + 1) + ":1", "expected a name of 1-256 characters"),
    ("m" * 100_000 + ":1", "expected a name of 1-256 characters"),
])
def test_a_mix_model_name_no_trace_holds_is_refused_naming_mix(tmp_path, capsys, command, mix, needle):
    """``trace generate --mix $'a\\nb:1'`` was refused only when writing, naming a job and not
    --mix; a 100,000-character model name was accepted."""
    trace = tmp_path / "t.csv"
    if command == "stats":
        trace.write_text("job_id,submit_time,gpus,duration_s\nj1,0,1,10\n")  # no model column: the mix assigns
        argv = ("trace", "stats", trace, "--mix", mix)
    else:
        argv = ("trace", "generate", "--jobs", 3, "--mix", mix, "--out", trace)
    rc, out, err = cli(capsys, *argv)
    assert (rc, out) == (2, "")
    line = one_error_line(err, "deepshare: error: --mix: model mix ", needle)
    assert len(line) < 400
    if command == "generate":
        assert not trace.exists()


def test_a_mix_weight_reads_ascii_digits_only():
    with pytest.raises(DeepShareError, match=r"weight must be a positive number, got '1_0'"):
        parse_mix("MoE:1_0")
    assert dict(parse_mix(" MoE : 2 ,m" + "x" * (MAX_FLAG_NAME_CHARS - 1) + ":1e0").weights) == {
        "MoE": 2.0, "m" + "x" * (MAX_FLAG_NAME_CHARS - 1): 1.0}


# -- 7: output lines are never wrapped when piped -----------------------------------------------------
def test_generate_and_stats_lines_are_not_wrapped(tmp_path, capsys):
    """Piped, the console wraps at 140 columns: a long path or model list broke a line in two."""
    path = tmp_path / ("d" * 150 + ".csv")
    model = "m" * 200
    rc, out, err = cli(capsys, "trace", "generate", "--jobs", 3, "--mix", f"{model}:1", "--out", path)
    assert rc == 0, err
    assert out.count("\n") == 1 and out.startswith("wrote 3 jobs to ") and str(path) in out
    rc, out, err = cli(capsys, "trace", "stats", path)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{path}: canonical trace"
    assert f"  models         {model}: 3" in lines
    assert all(line.startswith("  ") for line in lines[1:])


# -- 8: the canonical loader reads names the writer would write -----------------------------------------
@pytest.mark.parametrize(("row", "field", "shown"), [
    ('"j1\n2",0,MoE,1,10,', "job_id", "'j1\\n2'"),
    ('j1,0,"Mo\nE",1,10,', "model", "'Mo\\nE'"),
    ('j1,0,"Mo\rE",1,10,', "model", "'Mo\\rE'"),
])
def test_a_canonical_name_holding_a_line_break_is_refused(tmp_path, capsys, row, field, shown):
    """A quoted ``"j1\\n2"`` loaded as a job id that write_canonical refuses."""
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\n{row}\n", newline="")
    rc, out, err = cli(capsys, "trace", "stats", path)
    assert (rc, out) == (2, "")
    one_error_line(err, f"t.csv line 2: field '{field}': expected a name on one line", shown)


@pytest.mark.parametrize("column", ["user", "group", "vc", "queue", "priority", "required_level"])
def test_a_canonical_feature_name_holding_a_line_break_is_refused(tmp_path, column):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},{column}\nj1,0,MoE,1,10,,\"a\nb\"\n", newline="")
    with pytest.raises(DeepShareError, match=rf"t\.csv line 2: field '{column}': expected a name on one line"):
        load(path, format="canonical")


def test_a_canonical_trace_with_tabs_and_spaces_inside_names_round_trips(tmp_path):
    """What the writer writes (a tab or a space inside a name) still loads unchanged."""
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER},user\n\"j 1\",0,\"Mo\tE\",1,10,,\"u\t1\"\n", newline="")
    jobs = load(path, format="canonical").jobs
    assert (jobs[0].job_id, jobs[0].model, jobs[0].user) == ("j 1", "Mo\tE", "u\t1")
    write_canonical(jobs, tmp_path / "again.csv")
    assert load(tmp_path / "again.csv", format="canonical").jobs == jobs
