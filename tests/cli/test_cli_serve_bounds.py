"""``serve``'s sizes are bounded: an absurd --replicas or --max-body-bytes is refused before Ray starts."""

from __future__ import annotations

import pytest
from cli_run import cli


@pytest.fixture(autouse=True)
def no_service(monkeypatch):
    """A value that passes would start the service: fail at once instead."""
    import deepshare.serving.service

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the flags were accepted and the service started")

    monkeypatch.setattr(deepshare.serving.service, "run_service", started)


@pytest.mark.parametrize("flag, value, expected", [
    ("--replicas", "100000000", "expected an integer from 1 to 256 replicas"),
    ("--replicas", "0", "expected an integer from 1 to 256 replicas"),
    ("--max-body-bytes", "99999999999999999999", "expected an integer from 1 to 1,073,741,824 bytes"),
    ("--max-body-bytes", "0", "expected an integer from 1 to 1,073,741,824 bytes"),
])
def test_serve_refuses_sizes_out_of_range(capsys, flag, value, expected):
    rc, _, err = cli(capsys, "serve", flag, value)
    assert rc == 2
    assert f"argument {flag}: {expected}, got '{value}'" in err and "Traceback" not in err


def test_serve_help_gives_the_ranges(capsys):
    _, out, _ = cli(capsys, "serve", "--help")
    text = " ".join(out.split())
    assert "1..256 (default 1)" in text and "1 byte to 1 GiB (default 4 MiB)" in text
