"""``deepshare logs ID --tail N``: the last N lines of a rank's log, read back from its end.

Against the real API over a real rank log, several times the server's 64 KiB chunk, with
multi-byte characters across the chunk cuts; with ``--follow`` it goes on from the end."""

from __future__ import annotations

import threading
import time

import pytest
from cli_run import cli

from deepshare.cli.scheduler import last_lines
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.logs import MAX_CHUNK, rank_log_path
from deepshare.runtime.spec import spec_from_json

pytest.importorskip("uvicorn")
from test_runtime_api import TOKEN, serving  # noqa: E402

LINES = [f"{i:06d} {'é' * (i % 50)}{'x' * (i % 7)}\n" for i in range(12_000)]  # about 700 KiB, 2-byte characters


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


@pytest.mark.parametrize("text, n, expected", [
    ("", 3, ""), ("a", 1, "a"), ("a\n", 1, "a\n"), ("a\nb", 1, "b"), ("a\nb\n", 1, "b\n"),
    ("a\nb\nc\n", 2, "b\nc\n"), ("a\nb\nc\n", 5, "a\nb\nc\n"), ("\n\n", 1, "\n"), ("a\nb\n", 0, ""),
])
def test_last_lines(text, n, expected):
    assert last_lines(text, n) == expected


def test_a_negative_tail_is_refused(capsys):
    rc, _, err = cli(capsys, "logs", "a-1", "--tail", "-1", "--url", "http://127.0.0.1:9", "--token", TOKEN)
    assert rc == 2 and "--tail" in err


def test_a_log_that_grows_while_it_is_read_back_is_read_at_its_new_size(tmp_path):
    """A running job appends between two reads: a chunk counted from the end then lands later
    than asked, and is asked again at the new size (the lines printed are the log's as first read)."""
    from deepshare.cli.scheduler import _tail
    from deepshare.runtime.logs import read_chunk

    path = tmp_path / "rank-0.log"
    path.write_text("".join(LINES), encoding="utf-8")

    class Growing:
        calls = 0

        def logs(self, _job, _rank, offset, limit=MAX_CHUNK):  # type: ignore[no-untyped-def]
            Growing.calls += 1
            if Growing.calls in (2, 4):
                with path.open("a", encoding="utf-8") as log:
                    log.write("grown é\n" * 1000)
            return read_chunk(path, offset, limit)

    text, end = _tail(Growing(), "a-1", 0, 4_000)
    assert text == "".join(LINES[-4_000:]) and end == len("".join(LINES).encode())


def test_a_missing_log_tails_to_nothing(served_log, capsys):
    url, job, path, _ = served_log
    path.unlink()
    rc, out, err = cli(capsys, "logs", job, "--tail", 5, "--url", url, "--token", TOKEN)
    assert (rc, out, err) == (0, "", "")
