"""What the scheduler's client commands print of a server's answers, and where the token goes.

A job's error carries its rank's log tail, and ``deepshare logs`` prints the rank's log: both are
the job's own output, read by whoever inspects the job (the admin too). Escape sequences in them
(OSC 52 writes the clipboard; cursor-up and erase-line forge earlier output) reached the terminal
raw. The state folder's admin token went to any ``--url``, and ``--token ''`` (an unset variable)
sent it too. ``logs --follow`` stopped on a truncated log, blaming the server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from cli_run import cli, one_error_line

TOKEN = "s3cret-token-0123"
ESC = "\x1b]52;c;aGVsbG8=\x07\x1b[1A\x1b[2Kforged line"
"""What a hostile job writes: the clipboard set, then the line above erased and replaced."""


class Scripted(BaseHTTPRequestHandler):
    """Answers ``server.route(method, path, query) -> (status, JSON-able body)``; records each request."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        self.server.seen.append((self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        status, body = self.server.route("GET", parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()})  # type: ignore[attr-defined]
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[..., tuple[int, Any]]], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(route: Callable[..., tuple[int, Any]]) -> str:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        srv.seen, srv.route = [], route  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    start.servers = servers  # type: ignore[attr-defined]
    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def job_detail(tmp_path, **changes: Any) -> dict[str, Any]:
    """A job's detail as the scheduler's own models write it, with ``changes``."""
    from deepshare.runtime.journal import Journal
    from deepshare.runtime.models import job_detail as detail_of
    from deepshare.runtime.spec import spec_from_json

    journal = Journal(tmp_path / "journal")
    record = journal.submit(spec_from_json({"name": "j", "gpus": 1, "model": "DLRM", "command": ["/bin/true"],
                                            "checkpoint_dir": "/tmp/c"}))
    doc = detail_of(record, journal.runs(record.job_id), journal.transitions(record.job_id),
                    checkpoint_dir=journal.run_names.checkpoint_dir(record.spec, record.job_id)).model_dump(mode="json")
    journal.close()
    return {**doc, **changes}


def log_chunk(text: str, offset: int, size: int) -> dict[str, Any]:
    return {"job_id": "a", "rank": 0, "offset": offset, "next_offset": offset + len(text.encode()), "size": size,
            "text": text}


def test_a_jobs_error_and_fields_print_escaped_one_line_each(serve, tmp_path, capsys):
    doc = job_detail(tmp_path, state="failed", model=f"DLRM{ESC}",
                     error=f"rank 0 exited with status 1:\nRuntimeError: boom{ESC}\nlast line\r")
    url = serve(lambda method, path, query: (200, doc))
    rc, out, err = cli(capsys, "jobs", doc["id"], "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert f"({'DLRM'}\\x1b]52;c;aGVsbG8=\\x07\\x1b[1A\\x1b[2Kforged line)" in out
    errors = [line for line in out.splitlines() if line.startswith("  error: ")]
    assert errors == ["  error: rank 0 exited with status 1:",
                      "  error: RuntimeError: boom\\x1b]52;c;aGVsbG8=\\x07\\x1b[1A\\x1b[2Kforged line",
                      "  error: last line"]


def test_the_jobs_table_and_the_queues_table_escape_what_the_server_sent(serve, tmp_path, capsys):
    job = {k: v for k, v in job_detail(tmp_path, model=f"M{ESC}", queue="q\x1b[31m").items()}
    queues = [{"queue": "q\x1b[31mred", "gpus_in_use": 1, "nominal_gpus": 2, "borrowed_gpus": 0, "pending_jobs": 0,
               "pending_gpus": 0}]
    url = serve(lambda method, path, query: (200, [job] if path == "/v1/jobs" else queues))
    for command in ("jobs", "queues"):
        rc, out, err = cli(capsys, command, "--url", url, "--token", TOKEN)
        assert rc == 0, err
        assert "\x1b" not in out and "\\x1b" in out


def test_logs_keep_line_breaks_and_tabs_and_escape_every_other_control(serve, capsys):
    text = f"step 1\tloss 0.5\r\nstep 2{ESC}\n\x9b31mC1\u202eevil\n"
    url = serve(lambda method, path, query: (200, log_chunk(text, 0, len(text.encode()))
                                              if query["offset"] == "0" else log_chunk("", len(text.encode()), len(text.encode()))))
    rc, out, err = cli(capsys, "logs", "a", "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert out == ("step 1\tloss 0.5\nstep 2\\x1b]52;c;aGVsbG8=\\x07\\x1b[1A\\x1b[2Kforged line\n"
                   "\\x9b31mC1\\u202eevil\n")


def test_logs_without_follow_stop_at_the_size_first_read(serve, capsys):
    """A log that keeps growing (or a server that says so for ever) kept ``logs`` reading."""
    url = serve(lambda method, path, query: (200, log_chunk("0123456789", int(query["offset"]), int(query["offset"]) + 20)))
    rc, out, err = cli(capsys, "logs", "a", "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert out == "0123456789" * 2  # the size at the first read was 20


def test_logs_follow_reads_a_truncated_log_again_from_its_start(serve, tmp_path, capsys):
    """A truncated log was a 'does not move on' error blaming the server, and the command stopped."""
    reads = iter([log_chunk("first run\n", 0, 10), log_chunk("", 2, 2), log_chunk("xy", 0, 2), log_chunk("", 2, 2)])
    states = iter(["running", "finished"])
    detail = job_detail(tmp_path)

    def route(method: str, path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path.endswith("/logs"):
            return 200, next(reads)
        return 200, {**detail, "state": next(states)}

    url = serve(route)
    rc, out, err = cli(capsys, "logs", "a", "--follow", "--poll", "0.01", "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert out == "first run\nxy"
    assert "the log shrank to 2 bytes (truncated or replaced); reading it again from the start" in err


def test_an_empty_token_is_refused(serve, capsys):
    url = serve(lambda method, path, query: (200, []))
    rc, out, err = cli(capsys, "queues", "--url", url, "--token", "")
    assert rc == 2 and out == ""
    one_error_line(err, "--token '': an empty token")


def test_the_state_folders_token_goes_only_to_the_url_its_scheduler_json_names(serve, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DEEPSHARE_SCHEDULER_TOKEN", raising=False)
    url = serve(lambda method, path, query: (200, []))
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").write_text("LOCAL-ADMIN-TOKEN\n")
    (state / "scheduler.json").write_text(json.dumps({"url": "http://127.0.0.1:1"}))  # another scheduler's
    rc, out, err = cli(capsys, "queues", "--url", url, "--state", state)
    assert rc == 2 and out == ""
    one_error_line(err, "no scheduler token for this --url: give --token or set $DEEPSHARE_SCHEDULER_TOKEN")
    (state / "scheduler.json").write_text(json.dumps({"url": url + "/"}))  # this one's: its token goes there
    rc, out, err = cli(capsys, "queues", "--url", url, "--state", state)
    assert rc == 0, err
    rc, out, err = cli(capsys, "queues", "--url", url, "--state", state, "--token", "given-token")
    assert rc == 0, err
    assert [auth for _, auth in serve.servers[0].seen] == ["Bearer LOCAL-ADMIN-TOKEN", "Bearer given-token"]


def test_a_crlf_cut_between_two_chunks_and_a_lone_carriage_return_read_as_line_breaks(serve, capsys):
    """Second read: the server cuts logs every 64 KiB, anywhere: a chunk ending in ``\\r`` whose
    ``\\n`` opened the next printed ``\\r`` escaped; a progress bar's lone ``\\r`` is a line break."""
    chunks = {0: log_chunk("line one\r", 0, 22), 9: log_chunk("\nbar 1\rbar 2\n", 9, 22)}
    url = serve(lambda method, path, query: (200, chunks.get(int(query["offset"]), log_chunk("", 22, 22))))
    rc, out, err = cli(capsys, "logs", "a", "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert out == "line one\nbar 1\nbar 2\n"


def test_follow_waits_its_poll_between_reads_of_a_log_that_keeps_shrinking(serve, tmp_path, capsys, monkeypatch):
    """Second read: a server answering "shrank" at every read had ``--follow`` ask thousands of
    times a second, ignoring ``--poll``."""
    import deepshare.cli.scheduler as scheduler_cli

    sleeps: list[float] = []
    monkeypatch.setattr(scheduler_cli.time, "sleep", lambda s: sleeps.append(s))
    detail = job_detail(tmp_path)
    answers = iter([log_chunk("0123456789", 0, 20), log_chunk("", 5, 5), log_chunk("0123456789", 0, 20),
                    log_chunk("", 5, 5), log_chunk("", 10, 10)])

    def route(method: str, path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path.endswith("/logs"):
            return 200, next(answers, log_chunk("", 10, 10))
        return 200, {**detail, "state": "finished"}

    url = serve(route)
    rc, out, err = cli(capsys, "logs", "a", "--follow", "--poll", "0.5", "--url", url, "--token", TOKEN)
    assert rc == 0, err
    assert sleeps.count(0.5) >= 2  # one wait after each shrink
