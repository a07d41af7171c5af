"""Review of how rank logs are read back (``deepshare.runtime.logs.read_chunk``, behind
``GET /v1/jobs/{id}/logs`` and ``deepshare logs``).

The log file lives in ``<state>/logs/<job>/``, a folder the job's own process can write (the
scheduler's user; on a multi-node cluster, the shared state folder, written from the node the
rank runs on). So what is at the log's path is the job's choice, and the reader must treat it as
``report.json`` is treated: no FIFO waited on, no symlink followed. And a log is read in byte
chunks of at most 64 KiB that the client concatenates: the text must survive the cut.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from deepshare.runtime.logs import MAX_CHUNK, read_chunk


def _follow(path: Path, offset: int = 0) -> str:
    """What ``deepshare logs`` prints: every chunk's text, asking again from ``next_offset``."""
    out = []
    for _ in range(10_000):
        chunk = read_chunk(path, offset)
        out.append(chunk.text)
        offset = chunk.next_offset
        if chunk.next_offset >= chunk.size:
            return "".join(out)
    raise AssertionError("read_chunk never reached the end of the log")


def test_a_character_cut_by_a_chunk_boundary_survives(tmp_path):
    """A training log's progress bars (tqdm's block characters), non-English messages and
    emoji are multi-byte UTF-8. Each chunk is decoded alone with ``errors="replace"`` and
    ``next_offset`` counts bytes, so a character across a 64 KiB boundary comes out as U+FFFD
    replacement characters in ``deepshare logs`` (one per 64 KiB of log) and is lost."""
    log = tmp_path / "rank-0.log"
    text = "x" * (MAX_CHUNK - 1) + "█▉ 100% ✓ réussi 完成\n" + "y" * (MAX_CHUNK - 2) + "é\n"
    log.write_bytes(text.encode("utf-8"))
    got = _follow(log)
    assert "\ufffd" not in got
    assert got == text


def test_reading_from_the_end_does_not_start_inside_a_character(tmp_path):
    """``offset`` < 0 (``?offset=-N``: the last N bytes) can land inside a character too."""
    log = tmp_path / "rank-0.log"
    log.write_bytes(("a" * 100 + "█" * 100 + "\n").encode("utf-8"))
    for back in (-2, -4, -50, -100):
        chunk = read_chunk(log, back)
        assert "\ufffd" not in chunk.text, (back, chunk.text[:5])


def test_a_fifo_at_the_log_path_is_not_waited_on(tmp_path):
    """A FIFO at the log's path: ``open`` blocks until a writer comes. Each ``GET .../logs``
    holds one of the API's worker threads forever; about 40 of them (anyio's default pool) stop
    every route of the API that runs in a thread, ``/healthz`` and the admin's included
    (reproduced against a real uvicorn: /healthz and GET /v1/jobs got no answer in 8 s after 45
    log requests). It must answer at once (no log, or an error), as ``report.json`` does."""
    log = tmp_path / "rank-0.log"
    os.mkfifo(log)
    result: list[object] = []

    def read() -> None:
        try:
            result.append(read_chunk(log, 0))
        except Exception as exc:  # noqa: BLE001 - any prompt answer is fine here
            result.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(5)
    blocked = thread.is_alive()
    if blocked:  # release it: a writer lets the blocked open return
        fd = os.open(log, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(10)
    assert not blocked, "read_chunk blocked on a FIFO at the log path"


def test_a_symlink_at_the_log_path_is_not_followed(tmp_path):
    """A symlink at the log's path makes the scheduler serve any file its own user can read to
    whoever may read the job's logs: on a multi-node cluster the job runs on another node (maybe
    as another user) and could not read the head node's local files itself."""
    secret = tmp_path / "head-only-secret"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    log = tmp_path / "logs" / "j-1" / "rank-0.log"
    log.parent.mkdir(parents=True)
    log.symlink_to(secret)
    try:
        chunk = read_chunk(log, 0)
    except (OSError, ValueError):
        return  # refused: fine
    assert "PRIVATE KEY" not in chunk.text
