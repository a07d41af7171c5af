"""``--url`` with ``--state``: the state folder's token is read only from a folder no other user can
write, as without ``--url``.

Its ``token`` is sent to ``--url`` when the folder's ``scheduler.json`` names that URL. Without
``--url`` the folder was checked (:func:`~deepshare.runtime.private.check_not_shared`); with it,
a token another user planted in a folder they can write was sent as the user's own: the user's
jobs went to that user's queue, where their specs (and environments) are that user's to read."""

from __future__ import annotations

import json

import pytest

from deepshare.cli import main
from deepshare.runtime.token import TOKEN_ENV

URL = "http://127.0.0.1:9"


@pytest.fixture
def shared_state(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    state = tmp_path / "state"
    state.mkdir()
    (state / "scheduler.json").write_text(json.dumps({"url": URL, "pid": 1}))
    (state / "token").write_text("planted-token-0123456789\n")
    state.chmod(0o777)
    return state


def test_a_token_from_a_folder_others_can_write_is_not_sent(shared_state, capsys):
    rc = main(["jobs", "--url", URL, "--state", str(shared_state)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "is writable by other users (mode 0777)" in err and "Traceback" not in err


@pytest.mark.parametrize("given", ["flag", "env"])
def test_a_token_given_otherwise_is_not_checked_against_the_folder(shared_state, capsys, monkeypatch, given):
    argv = ["jobs", "--url", URL, "--state", str(shared_state)]
    if given == "flag":
        argv += ["--token", "t" * 16]
    else:
        monkeypatch.setenv(TOKEN_ENV, "t" * 16)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc != 0 and "writable by other users" not in err and "no scheduler answers" in err, err
