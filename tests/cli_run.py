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


AGENTS_DEFAULTS = dict(address="auto", interval=1.0, report_interval=None, stale_after=None, metrics_port=None,
                       metrics_host="127.0.0.1", metrics_allowed_host=None, json=None)
"""The flags of ``deepshare agents start|stop|status`` as argparse leaves them when not given."""


def agents_handler(func, **flags: object) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """A ``deepshare agents`` handler (``cmd_start``, ``cmd_stop``...) called in this process with
    ``flags`` over :data:`AGENTS_DEFAULTS`, as ``main`` calls it (without connecting to Ray itself,
    so a test's own Ray session is used): (exit status, stdout, stderr), a DeepShareError as the
    one-line error and status 2 that ``main`` prints."""
    import argparse
    import io

    from rich.console import Console

    from deepshare.core.errors import DeepShareError

    args = argparse.Namespace(**{**AGENTS_DEFAULTS, **flags})
    out_buf, err_buf = io.StringIO(), io.StringIO()
    out, err = Console(file=out_buf, width=400), Console(file=err_buf, width=400)
    try:
        rc = func(args, out, err)
    except DeepShareError as exc:
        err.print(f"deepshare: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        rc = 2
    return rc, out_buf.getvalue(), err_buf.getvalue()
