"""The scheduler's bearer token: where the scheduler gets it and where its clients find it.

The scheduler uses ``$DEEPSHARE_SCHEDULER_TOKEN`` when set (8+ characters); otherwise it
generates one at every start (``secrets.token_urlsafe``) and writes it to ``<state>/token``,
created with mode 0600 (``os.open(..., 0o600)`` on a temporary name, then renamed: the file is
never readable by others, not even briefly). Clients (``deepshare submit|jobs|cancel|logs``)
take ``--token``, else the environment variable, else that file of ``--state DIR``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Mapping

from deepshare.core.errors import DeepShareError
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.infra.httpauth import check_token
from deepshare.runtime.private import check_not_shared

TOKEN_ENV = "DEEPSHARE_SCHEDULER_TOKEN"
TOKEN_FILE = "token"

def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from its first byte (temporary file + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an existing leftover keeps its mode through O_TRUNC
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise DeepShareError(f"{path}: cannot write the token ({exc.strerror or exc})") from None


def scheduler_token(state_dir: str | Path, environ: Mapping[str, str] = os.environ) -> tuple[str, Path | None]:
    """The token the scheduler requires and the file it wrote it to (None: taken from the environment).

    A token from the environment is never written to disk, and an old token file is removed so
    that clients reading it cannot be confused by a stale value.
    """
    path = Path(state_dir) / TOKEN_FILE
    given = environ.get(TOKEN_ENV)
    if given:
        token = check_token(given, f"${TOKEN_ENV}")
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise DeepShareError(f"{path}: cannot remove the old token file ({exc.strerror or exc})") from None
        return token, None
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    return token, path


def client_token(flag: str | None, state_dir: str | Path | None, environ: Mapping[str, str] = os.environ,
                 url_given: bool = False) -> str:
    """The token a client sends: ``--token``, else ``$DEEPSHARE_SCHEDULER_TOKEN``, else ``<state>/token``;
    checked like the scheduler's (:func:`check_token`), so a pasted line break or space is one line
    naming where the token came from, not an invalid HTTP header deep in ``urllib``. ``url_given``:
    no state folder is asked because ``--url`` names a scheduler other than the state's (the
    error then says so)."""
    if flag:
        return check_token(flag, "--token")
    if environ.get(TOKEN_ENV):
        return check_token(environ[TOKEN_ENV], f"${TOKEN_ENV}")
    if state_dir is not None:
        check_not_shared(state_dir)  # a token another user planted there would be sent as the caller's own
        path = Path(state_dir) / TOKEN_FILE
        text = ""
        if os.path.lexists(path):  # a regular file, bounded: a FIFO or a device there is one line, never a hang
            text = read_input_text(path, "token file", CONFIG_BYTES, label=f"--state {state_dir}: {path}").strip()
        if text:
            return check_token(text, str(path))
    if url_given:
        raise DeepShareError(f"no scheduler token for this --url: give --token or set ${TOKEN_ENV} (a --state folder's "
                             f"{TOKEN_FILE} is sent only to the URL its scheduler.json names)")
    raise DeepShareError(f"no scheduler token: give --token, set ${TOKEN_ENV}, or --state DIR of the scheduler "
                         f"(it writes DIR/{TOKEN_FILE})")
