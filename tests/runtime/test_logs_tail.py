"""``deepshare logs ID --tail N``: from where the last N lines of a rank's log start.

The scheduler finds that offset (:func:`~deepshare.runtime.logs.tail_offset`, reading back from
the end over bytes, where a line break is ``\\n``, ``\\r\\n`` or a lone ``\\r`` as the CLI prints
them), and the CLI reads on from there as it reads any log. Tested against the real API over real
rank logs several times the 64 KiB chunk, with multi-byte characters, and against a reference on
generated text with the look back cut into tiny blocks."""

from __future__ import annotations

import re
import threading
import time

import pytest
from cli_run import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.runtime import logs
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.logs import MAX_CHUNK, rank_log_path, tail_offset
from deepshare.runtime.spec import spec_from_json

pytest.importorskip("uvicorn")
from test_runtime_api import TOKEN, call, serving  # noqa: E402

LINES = [f"{i:06d} {'é' * (i % 50)}{'x' * (i % 7)}\n" for i in range(12_000)]  # about 700 KiB, 2-byte characters


def reference(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``, breaks as printed (``\\n``, ``\\r\\n``, a lone ``\\r``)."""
    if lines == 0:
        return ""
    marked = text.replace("\r\n", "\0\n").replace("\r", "\n")  # each break's last character a "\n"
    cut = len(marked) - marked.endswith("\n")
    for _ in range(lines):
        cut = marked.rfind("\n", 0, cut)
        if cut < 0:
            return text
    return text[cut + 1:]


@given(text=st.text(alphabet="ab\n\ré😀", max_size=60), lines=st.integers(0, 12), block=st.integers(1, 9))
@settings(max_examples=400, deadline=None)
def test_tail_offset_is_where_the_reference_last_lines_start(tmp_path_factory, text, lines, block):
    path = tmp_path_factory.mktemp("t") / "rank-0.log"
    data = text.encode()
    path.write_bytes(data)
    saved = logs.MAX_CHUNK
    logs.MAX_CHUNK = block  # the look back cut into tiny blocks: CRLFs and characters across every cut
    try:
        offset = tail_offset(path, lines)
    finally:
        logs.MAX_CHUNK = saved
    assert data[offset:].decode() == reference(text, lines)


def test_a_look_back_past_its_bound_starts_on_a_whole_character(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_bytes("é".encode() * 1000 + b"\n")  # one line of 2,001 bytes
    offset = tail_offset(path, 5, max_scan=1000)  # the bound falls inside a character (at byte 1,001)
    assert offset == 1002 and path.read_bytes()[offset:].decode() == "é" * 499 + "\n"
    assert tail_offset(path, 5, max_scan=1001) == 1000  # on a character's first byte
    assert tail_offset(tmp_path / "none.log", 5) == 0
    assert tail_offset(path, 0) == 2001


@pytest.fixture
def served_log(tmp_path):
    state = tmp_path / "state"
    journal = Journal(state)
    job = journal.submit(spec_from_json(dict(name="a", gpus=1, model="DLRM", command=["true"],
                                             checkpoint_dir=str(tmp_path / "c")))).job_id
    path = rank_log_path(state, job, 0)
    path.parent.mkdir(parents=True)
    path.write_text("".join(LINES), encoding="utf-8")
    assert path.stat().st_size > 8 * MAX_CHUNK
    with serving(journal, cluster_gpus=lambda: (8, 1), state_dir=str(state)) as url:
        yield url, job, path, journal
    journal.close()


@pytest.mark.parametrize("n", [0, 1, 3, 500, 4_000, 11_999, 12_000, 50_000])
def test_tail_prints_exactly_the_last_lines(served_log, capsys, n):
    url, job, _, _ = served_log
    rc, out, err = cli(capsys, "logs", job, "--tail", n, "--url", url, "--token", TOKEN)
    assert rc == 0 and err == ""
    assert out == "".join(LINES[len(LINES) - n:] if n else [])


def test_a_last_line_without_its_newline_is_a_line(served_log, capsys):
    url, job, path, _ = served_log
    with path.open("a", encoding="utf-8") as log:
        log.write("partial é")
    rc, out, _ = cli(capsys, "logs", job, "--tail", 2, "--url", url, "--token", TOKEN)
    assert rc == 0 and out == LINES[-1] + "partial é"


def test_a_progress_bar_logs_tail_is_the_lines_it_prints(served_log, capsys):
    """A lone carriage return is printed as a line break: ``--tail 3`` of a progress bar's
    200,000 redraws printed all of them when only ``\\n`` counted."""
    url, job, path, _ = served_log
    path.write_text("header\n" + "".join(f"step {i}\r" for i in range(200_000)) + "done\r\n", encoding="utf-8")
    rc, out, _ = cli(capsys, "logs", job, "--tail", 3, "--url", url, "--token", TOKEN)
    assert rc == 0 and out == "step 199998\nstep 199999\ndone\n"


def test_tail_then_follow_prints_what_comes_after(served_log, capsys):
    url, job, path, journal = served_log

    def later() -> None:
        time.sleep(0.5)
        with path.open("a", encoding="utf-8") as log:
            log.write("after 1\nafter 2\n")
        time.sleep(0.5)
        journal.cancel_queued(job)  # the job is over: --follow stops

    writer = threading.Thread(target=later)
    writer.start()
    rc, out, _ = cli(capsys, "logs", job, "--tail", 2, "--follow", "--poll", "0.1", "--url", url, "--token", TOKEN)
    writer.join()
    assert rc == 0 and out == LINES[-2] + LINES[-1] + "after 1\nafter 2\n"
    assert journal.get(job).state is JobState.CANCELLED


def test_the_api_takes_tail_or_offset_and_bounds_tail(served_log):
    url, job, path, _ = served_log
    status, chunk = call(url, "GET", f"/v1/jobs/{job}/logs?tail=2")
    size = path.stat().st_size
    assert status == 200 and chunk["offset"] == size - len((LINES[-2] + LINES[-1]).encode())  # type: ignore[index]
    for query, needle in (("tail=2&offset=0", "give at most one of offset and tail"),
                          ("tail=-1", "tail: expected 0..10000000 lines, got -1"),
                          ("tail=10000001", "tail: expected 0..10000000 lines"), ("tail=x", "tail: expected an integer")):
        status, answer = call(url, "GET", f"/v1/jobs/{job}/logs?{query}")
        assert status == 422 and needle in str(answer), (query, answer)


def test_a_missing_log_tails_to_nothing(served_log, capsys):
    url, job, path, _ = served_log
    path.unlink()
    rc, out, err = cli(capsys, "logs", job, "--tail", 5, "--url", url, "--token", TOKEN)
    assert (rc, out, err) == (0, "", "")


@pytest.mark.parametrize("value", ["-1", "10000001", "x"])
def test_a_tail_out_of_range_is_refused(capsys, value):
    rc, _, err = cli(capsys, "logs", "a-1", "--tail", value, "--url", "http://127.0.0.1:9", "--token", TOKEN)
    assert rc == 2 and "--tail" in err


def test_only_the_block_holding_the_first_line_is_read_break_by_break(tmp_path, monkeypatch):
    """Blocks the look back passes through are counted whole: break by break, a tenant's log of
    bare line breaks (or a progress bar's bare ``\\r``) cost the server 1.6 s of CPU, the GIL held,
    for each ``tail=10000000``."""
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"x\r\n" + b"\n\r\r\n" * (8 * MAX_CHUNK // 4) + b"last\r")
    scanned = []

    class Counted:
        def finditer(self, block):  # type: ignore[no-untyped-def]
            scanned.append(len(block))
            return re.finditer(rb"\r\n|\r|\n", block)

    monkeypatch.setattr(logs, "_BREAK", Counted())
    lines = 3 * (8 * MAX_CHUNK // 4) + 1  # every line but "x"
    assert tail_offset(path, lines) == 3 and tail_offset(path, lines + 1) == 0
    assert len(scanned) == 1


class _DropsTail:
    """A scheduler older than ``tail``: the API with the ``tail`` query parameter unread."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self.app = app

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            query = [p for p in scope["query_string"].split(b"&") if not p.startswith(b"tail=")]
            scope = {**scope, "query_string": b"&".join(query)}
        await self.app(scope, receive, send)


def test_a_scheduler_that_ignores_tail_is_an_error_not_the_whole_log(served_log, capsys):
    """A 0.1.0 scheduler answers ``tail=N`` with the log from its start: ``--tail 2`` printed all
    of a 700 KiB log (any size) as its last two lines."""
    from api_serving import served

    from deepshare.runtime.api import guard, make_app
    from deepshare.runtime.service import api_server

    _, job, path, journal = served_log
    app = guard(make_app(journal, cluster_gpus=lambda: (8, 1), state_dir=str(path.parents[2])), token=TOKEN,
                bound_host="127.0.0.1")
    with served(api_server(_DropsTail(app))) as port:
        rc, out, err = cli(capsys, "logs", job, "--tail", 2, "--url", f"http://127.0.0.1:{port}", "--token", TOKEN)
    assert rc != 0 and out == "" and "--tail" in err and LINES[0] not in err
