"""A symlink loop given as an input, an output folder or a job spec's folder is one error line
(Python 3.11's ``Path.resolve`` raises ``RuntimeError`` there, which was a traceback whenever an
output flag made the CLI compare paths)."""

from __future__ import annotations

import pytest
from cli_run import cli, one_error_line

from deepshare.core.files import resolved


@pytest.fixture
def loop(tmp_path):
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    return tmp_path / "loopA"


def test_resolved_raises_a_loop_as_the_oserror_it_is(loop):
    with pytest.raises(OSError) as caught:
        resolved(loop / "x")
    assert caught.value.filename == str(loop / "x") and "symbolic links" in caught.value.strerror


@pytest.mark.parametrize("argv", [
    ("simulate", "--trace", "{loop}", "--policy", "las+consolidated", "--json", "{out}/r.json"),
    ("simulate", "--trace", "{trace}", "--cluster", "{loop}", "--policy", "las+consolidated", "--jobs-csv", "{out}/j.csv"),
    ("compare", "--trace", "{loop}", "--policies", "las+consolidated,srsf+packed", "--json", "{out}/c.json"),
    ("trace", "stats", "{loop}", "--json", "{out}/s.json"),
    ("clusters", "import", "{loop}", "--out", "{out}/c.yaml"),
    ("export-policy", "{loop}", "--out", "{out}/p.pt", "--kind", "network"),
    ("evaluate", "--suite", "tiny", "--out", "{loop}"),
    ("evaluate", "--suite", "tiny", "--out", "{loop}/x"),
])
def test_a_symlink_loop_is_one_error_line(capsys, tmp_path, loop, argv):
    out = tmp_path / "out"
    out.mkdir()
    trace = tmp_path / "t.csv"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", 5, "--load", 0.9, "--nodes", 2, "--seed", 1, "--out", trace)
    assert rc == 0, err
    args = [a.format(loop=loop, out=out, trace=trace) for a in argv]
    rc, _, err = cli(capsys, *args)
    assert rc == 2, err
    one_error_line(err)
    assert list(out.iterdir()) == []


def test_a_job_spec_whose_checkpoint_dir_loops_is_one_error_line(capsys, tmp_path, loop):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\ngpus: 1\nmodel: FSDP\nentrypoint: pkg.mod:main\ncheckpoint_dir: loopA/ck\n")
    rc, _, err = cli(capsys, "submit", spec, "--url", "http://127.0.0.1:9", "--token", "t" * 16)
    assert rc == 2, err
    one_error_line(err, "loopA")
