"""Running ``deepshare`` in-process in tests, and the one-line error every input error must be."""

from __future__ import annotations

import pytest

from deepshare.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """``deepshare ARGV`` in this process: (exit status, stdout, stderr); argparse's exits too."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str, *needles: str) -> str:
    """The single ``deepshare: error: ...`` line of ``err`` (no traceback), containing every needle."""
    assert "Traceback" not in err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("deepshare: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
