"""Review of ``deepshare scheduler start`` as a careless operator runs it: a restart with other
flags on a state folder that has jobs, empty paths from unset variables, flags that were
dropped silently, and ``--host`` / ``--allowed-host`` values.

No Ray: everything here is decided before ``run_scheduler`` starts Ray, so ``start_ray`` is
replaced by a sentinel that says "the start got this far".
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.runtime import service
from deepshare.runtime.cluster import label_levels
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.service import ServiceConfig, run_scheduler
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.token import TOKEN_ENV

SPEC = dict(name="gang", gpus=2, model="DLRM", command=["/bin/true"], checkpoint_dir="/tmp/ckpt")


class ReachedRay(Exception):
    """``run_scheduler`` accepted everything it checks before Ray."""


@pytest.fixture
def no_ray(monkeypatch):
    def reached(*_a, **_k):
        raise ReachedRay()

    monkeypatch.setattr(service, "start_ray", reached)
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def _start(state: Path, **config: object) -> None:
    from deepshare.policies import make_policy

    run_scheduler(ServiceConfig(state_dir=str(state), port=0, local_nodes=1, **config),  # type: ignore[arg-type]
                  make_policy("fifo+consolidated"), announce=lambda _line: None, stop=threading.Event(),
                  handle_signals=False)


def _cli(capsys, *argv: object) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return rc, err


# -- a restart without the fabric levels its jobs name ------------------------------------------
@pytest.mark.parametrize("field", ["required_level", "preferred_level"])
@pytest.mark.parametrize("running", [False, True])
def test_a_restart_without_the_levels_its_jobs_name_is_refused_before_ray(tmp_path, no_ray, field, running):
    """Jobs submitted to ``scheduler start --level leaf=...`` name ``leaf``; the same state folder
    restarted without ``--level`` (or with the level renamed) started, and at its first tick
    every such job was ``failed`` (``isolated: its view cannot be built ... unknown fabric level
    'leaf'``), a running one's placement group and ranks removed from the cluster. The tenants
    file is held to the same rule at start (a queued or running job's queue must be declared):
    refuse the start in one line naming the job, before Ray, and leave the journal as it was."""
    state = tmp_path / "state"
    journal = Journal(state)
    job = journal.submit(spec_from_json({**SPEC, field: "leaf"})).job_id
    if running:
        journal.start_run(job, (("node0", 2),), None)
    journal.close()
    with pytest.raises(DeepShareError) as refused:
        _start(state)
    assert f"job {job!r}" in str(refused.value) and "--level" in str(refused.value), refused.value
    assert "'leaf'" in str(refused.value)
    journal = Journal(state)
    assert journal.get(job).state is (JobState.RUNNING if running else JobState.QUEUED)
    journal.close()
    with pytest.raises(ReachedRay):  # with the levels it was submitted under, it starts
        _start(state, levels=label_levels(["leaf=example.com/leaf"]))


def test_finished_jobs_naming_a_level_do_not_hold_a_restart(tmp_path, no_ray):
    state = tmp_path / "state"
    journal = Journal(state)
    journal.cancel_queued(journal.submit(spec_from_json({**SPEC, "required_level": "leaf"})).job_id)
    journal.close()
    with pytest.raises(ReachedRay):
        _start(state)


# -- empty paths ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value"), [("--state", ""), ("--state", " "), ("--tenants", "")])
def test_an_empty_state_or_tenants_path_is_refused(tmp_path, capsys, monkeypatch, no_ray, flag, value):
    """``--state "$STATE"`` with the variable unset ran the scheduler in the current folder: its
    journal, token, lock and rank logs written among the project's files (and
    ``--tenants ''`` said the current folder "is a directory")."""
    monkeypatch.chdir(tmp_path)
    argv = ["scheduler", "start", "--local", "--port", "0", "--policy", "fifo+consolidated"]
    argv += [flag, value] if flag == "--state" else ["--state", "st", flag, value]
    rc, err = _cli(capsys, *argv)
    assert rc == 2 and err == f"deepshare: error: {flag} {value!r}: an empty path; give a " \
                              f"{'folder' if flag == '--state' else 'file'}", err
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


# -- flags that were dropped ---------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "needle"), [
    (["--placement-token", "abcdefghijkl"], "--placement-token goes with --placement-url"),
    (["--contention-knowledge", "exact", "--refit-interval", "10"],
     "--refit-interval goes with --contention-knowledge learned"),
])
def test_a_start_flag_that_would_be_ignored_is_refused(tmp_path, capsys, no_ray, extra, needle):
    """Both started with rc 0: the placement token went nowhere (the registry's policy ran), and
    no model is refitted under ``exact``."""
    rc, err = _cli(capsys, "scheduler", "start", "--local", "--port", "0", "--state", tmp_path / "s", *extra)
    assert rc == 2 and err == f"deepshare: error: {needle}", err


def test_the_refit_interval_still_reaches_the_service(tmp_path, monkeypatch):
    seen: list[float] = []

    def record(config, *_a, **_k):  # type: ignore[no-untyped-def]
        seen.append(config.refit_s)
        return 0

    monkeypatch.setattr(service, "run_scheduler", record)
    base = ["scheduler", "start", "--local", "--port", "0", "--state", str(tmp_path / "s")]
    assert main(base) == 0 and main([*base, "--refit-interval", "12"]) == 0
    assert main([*base, "--contention-knowledge", "exact"]) == 0
    assert seen == [300.0, 12.0, 300.0]


# -- --host and --allowed-host ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["", "a b", "x/y"])
def test_an_allowed_host_no_host_header_can_name_is_refused(capsys, name):
    """``--allowed-host ''`` was dropped silently and ``--allowed-host 'a b'`` accepted though no
    ``Host`` header can match it (the agents' ``--metrics-allowed-host`` refuses both)."""
    from deepshare.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["scheduler", "start", "--allowed-host", name])
    assert exit_.value.code == 2
    assert "--allowed-host: expected a host name" in capsys.readouterr().err


def test_a_bracketed_ipv6_host_binds_and_an_unknown_host_names_host():
    """``--host [::1]`` (as a URL writes it, and as the exposure check reads it) failed with
    ``--port 8470: cannot listen on [::1]:8470 (Name or service not known)``: the wrong flag."""
    try:
        sock = service.bind("[::1]", 0)
    except DeepShareError as exc:
        if "Address family not supported" in str(exc) or "Cannot assign" in str(exc):
            pytest.skip(f"no IPv6 loopback here: {exc}")
        raise
    try:
        assert sock.getsockname()[0] == "::1"
    finally:
        sock.close()
    with pytest.raises(DeepShareError, match=r"^--host nosuch\.invalid: not an address to listen on"):
        service.bind("nosuch.invalid", 0)


@pytest.mark.parametrize("host", ["[]", "[ ]"])
def test_empty_brackets_are_an_empty_host_not_every_interface(capsys, host):
    """``--host "[$HOST]"`` with the variable unset: the brackets were stripped at bind, and
    ``bind(("", port))`` listened on every interface (as 0.0.0.0), which ``bind_host`` refuses
    for an empty ``--host``."""
    from deepshare.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["scheduler", "start", "--host", host])
    assert exit_.value.code == 2 and "an empty host binds every interface" in capsys.readouterr().err
    with pytest.raises(DeepShareError, match="an empty address binds every interface"):
        service.bind(host, 0).close()


def test_a_journal_row_that_is_not_utf8_is_quarantined_at_the_start(tmp_path, no_ray):
    """A queued job's spec edited to hold bytes that are not UTF-8: the level check's read was a
    ``sqlite3.OperationalError`` traceback; the row is quarantined (naming the column and the
    byte) and the start goes on, as for any row that cannot be read."""
    import sqlite3

    state = tmp_path / "state"
    journal = Journal(state)
    bad = journal.submit(spec_from_json(SPEC)).job_id
    journal.close()
    db = sqlite3.connect(state / "journal.sqlite")
    db.execute("UPDATE jobs SET spec=CAST(X'7B22ff227D' AS TEXT)")
    db.commit()
    db.close()
    with pytest.raises(ReachedRay):
        _start(state)
    journal = Journal(state)
    record = journal.get(bad)
    assert record.state is JobState.FAILED
    assert record.error == "quarantined: its journal row cannot be read (spec: byte 0xff at offset 2 is not UTF-8)"
    journal.close()
