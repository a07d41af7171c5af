"""A restart on another Ray cluster than the one the journal's runs are on is refused.

Recovery requeues a running job whose run it does not find; on another cluster it never finds one,
so every running job was launched a second time while its first run went on where it was (two
runs of one job at once, on one checkpoint folder). The journal records the cluster its runs are
launched on (Ray's session name) and a start elsewhere is refused while that cluster still answers
at its address, unless ``--requeue-lost-runs``; one that no longer answers is taken as gone.

Ray is not started here: ``start_ray`` returns an address, the session name is the test's and
``_run`` (recovery, API, loop) records that it was reached.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.runtime import cluster_guard, service
from deepshare.runtime.cluster_guard import RAY_CLUSTER_KEY, RayCluster, check_same_cluster, recorded
from deepshare.runtime.journal import JobState, Journal
from deepshare.runtime.service import ServiceConfig, run_scheduler
from deepshare.runtime.spec import spec_from_json
from deepshare.runtime.token import TOKEN_ENV

SPEC = dict(name="train", gpus=2, model="DLRM", command=["/bin/true"], checkpoint_dir="/tmp/ckpt")
A_SESSION = "session_2026-12-01_10-00-00_000001_111"
B = RayCluster("session_2026-12-08_09-00-00_000002_222", "10.0.0.9:6379")


def _running(journal: Journal, n: int = 1) -> list[str]:
    ids = []
    for _ in range(n):
        job = journal.submit(spec_from_json(SPEC)).job_id
        journal.start_run(job, (("node0", 2),), None)
        ids.append(job)
    return ids


# -- the guard itself -----------------------------------------------------------------------------
@pytest.fixture
def listening():
    """A loopback address something answers at (the first cluster's head, still up)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def A(listening):  # noqa: N802 - the first cluster, up
    return RayCluster(A_SESSION, listening)


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed


def test_a_journal_without_a_record_takes_the_cluster_it_joins(journal, A):
    _running(journal)
    assert recorded(journal) is None
    assert check_same_cluster(journal, A, requeue_lost_runs=False) is None
    assert recorded(journal) == A


def test_the_same_cluster_at_another_address_is_the_same_cluster(journal, A):
    _running(journal)
    cluster_guard.record(journal, A)
    here = RayCluster(A.session, "ray-head.svc:6379")
    assert check_same_cluster(journal, here, requeue_lost_runs=False) is None
    assert recorded(journal) == here  # the address to give --address now


def test_runs_on_another_cluster_that_answers_refuse_the_start_naming_both_and_the_jobs(journal, A):
    jobs = _running(journal, 7)
    cluster_guard.record(journal, A)
    with pytest.raises(DeepShareError) as refused:
        check_same_cluster(journal, B, requeue_lost_runs=False)
    text = str(refused.value)
    assert "\n" not in text
    assert text == (f"7 run(s) of this state folder's jobs ({', '.join(jobs[:5])} and 2 more) were launched on another "
                    f"Ray cluster, {A.session} at {A.address}, which still answers there; this start joined "
                    f"{B.session} at 10.0.0.9:6379, where they are not, and would requeue them while they may still "
                    f"run there (twice at once, on the same checkpoints). Restart with --address {A.address} to "
                    "re-attach to them, or, once their runs there are stopped, add --requeue-lost-runs")
    assert recorded(journal) == A  # nothing changed
    assert all(journal.get(j).state is JobState.RUNNING for j in jobs)


def test_a_cluster_that_no_longer_answers_is_taken_as_gone(journal):
    """A KubeRay cluster recreated under its service name: the old head pod's address is silent,
    and without its head no node of it runs on. The start goes on and says so."""
    jobs = _running(journal, 2)
    gone = RayCluster(A_SESSION, _closed_port())
    cluster_guard.record(journal, gone)
    moved = check_same_cluster(journal, B, requeue_lost_runs=False)
    assert moved is not None and moved.jobs == jobs and moved.why == "silent"
    assert moved.describe() == (f"the Ray cluster the run(s) of 2 job(s) were launched on, {A_SESSION} at "
                                f"{gone.address}, is gone: its address refuses connections (nothing listens there); "
                                "they are taken as gone with it (its workers stop within Ray's GCS reconnect timeout, "
                                "60 s by default), and the running ones requeued")
    assert recorded(journal) == B


def test_a_killed_local_cluster_that_still_answers_says_to_stop_its_processes(journal, listening):
    _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, listening, local=True))
    with pytest.raises(DeepShareError) as refused:
        check_same_cluster(journal, RayCluster(B.session, "127.0.0.1:6380", local=True), requeue_lost_runs=False)
    text = str(refused.value)
    assert f"the --local cluster {A_SESSION} at {listening}, which still answers there" in text
    assert text.endswith(". Its scheduler was killed and it did not stop with it: stop its Ray processes by PID and "
                         "start again, or, once their runs there are stopped, add --requeue-lost-runs")


def test_a_killed_local_cluster_gone_with_its_scheduler_holds_nothing(journal):
    """On Linux Ray's processes share their starter's fate: a SIGKILLed ``--local`` scheduler took
    its cluster and its runs with it (seen: no raylet, GCS or worker left), so the start goes on and
    recovery requeues the jobs."""
    _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, _closed_port(), local=True))
    assert check_same_cluster(journal, B, requeue_lost_runs=False).why == "silent"
    assert recorded(journal) == B


def test_answers(listening):
    assert cluster_guard.probe(listening) == cluster_guard.ANSWERS
    assert cluster_guard.probe(_closed_port()) == cluster_guard.REFUSED
    assert cluster_guard.probe("no-port") == cluster_guard.probe("127.0.0.1:x") == cluster_guard.SILENT


def test_requeue_lost_runs_gives_them_up_and_records_the_new_cluster(journal, A):
    jobs = _running(journal, 2)
    cluster_guard.record(journal, A)
    moved = check_same_cluster(journal, B, requeue_lost_runs=True)
    assert moved is not None and moved.jobs == jobs and moved.why == "flag"
    assert moved.describe().startswith("--requeue-lost-runs: the run(s) of 2 job(s) on ")
    assert recorded(journal) == B
    assert check_same_cluster(journal, B, requeue_lost_runs=False) is None  # the next start is on the same one


@pytest.mark.parametrize("ended", ["finished", "requeued"])
def test_no_open_run_no_refusal(journal, A, ended):
    """Moving a state folder whose runs all ended to another cluster is allowed."""
    job = _running(journal)[0]
    state = JobState.FINISHED if ended == "finished" else JobState.QUEUED
    journal.end_run(job, 1, state, "test")
    cluster_guard.record(journal, A)
    assert check_same_cluster(journal, B, requeue_lost_runs=False) is None
    assert recorded(journal) == B


def test_a_quarantined_jobs_run_still_to_remove_counts(journal, A):
    """A quarantined row's run stays open until it is removed from the cluster it is on."""
    job = _running(journal)[0]
    cluster_guard.record(journal, A)
    journal._db.execute("UPDATE jobs SET spec = 'not json' WHERE id = ?", (job,))
    journal._db.commit()
    assert journal.get(job).state is JobState.FAILED  # quarantined
    assert [j for j, *_ in journal.orphans()] == [job]
    with pytest.raises(DeepShareError, match=rf"1 run\(s\) of this state folder's jobs \({job}\)"):
        check_same_cluster(journal, B, requeue_lost_runs=False)


def test_an_answer_asked_before_this_start_is_not_asked_again(journal):
    """The answer is asked before this start's Ray (:func:`recorded_answers`): a new local
    cluster's processes listen on ports the OS picks, and one may be the dead one's."""
    _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, _closed_port(), local=True))
    with pytest.raises(DeepShareError, match="Its scheduler was killed"):
        check_same_cluster(journal, B, requeue_lost_runs=False, answered=cluster_guard.ANSWERS)
    assert check_same_cluster(journal, B, requeue_lost_runs=False, answered=cluster_guard.REFUSED).why == "silent"


@pytest.mark.parametrize("value", ["", "not json", "[]", '{"session": "s"}', '{"session": 1, "address": "a", "local": false}',
                                   '{"session": "", "address": "a", "local": false}',
                                   '{"session": "s", "address": "a", "local": "no"}',
                                   json.dumps({"session": "s" * 300, "address": "a", "local": False})])
def test_a_record_that_does_not_read_is_not_recorded(journal, value, caplog):
    _running(journal)
    journal.set_meta(RAY_CLUSTER_KEY, value)
    assert recorded(journal) is None and cluster_guard.recorded_answers(journal) is None
    assert "is not a Ray cluster record" in caplog.text
    assert check_same_cluster(journal, B, requeue_lost_runs=False) is None
    assert recorded(journal) == B


def test_a_record_of_bytes_that_are_not_utf8_is_not_recorded(journal, caplog):
    _running(journal)
    journal._db.execute("INSERT OR REPLACE INTO meta VALUES (?, CAST(? AS TEXT))", (RAY_CLUSTER_KEY, b"{\xff}"))
    assert recorded(journal) is None and "is not a Ray cluster record" in caplog.text


def test_forget_local_removes_only_its_own_record(journal):
    local = RayCluster(A_SESSION, "127.0.0.1:1", local=True)
    cluster_guard.record(journal, B)
    cluster_guard.forget_local(journal, local)
    assert recorded(journal) == B
    cluster_guard.record(journal, local)
    cluster_guard.forget_local(journal, local)
    assert recorded(journal) is None


# -- through run_scheduler and the CLI -------------------------------------------------------------
class Reached(Exception):
    """``_run`` (recovery, the API, the loop) was reached."""


class FakeLocal:
    """A ``--local`` cluster that starts and stops at once (its runs would stop with it)."""

    stopped = 0

    def __init__(self, *_a, **_k) -> None:
        pass

    def start(self) -> str:
        return "127.0.0.1:6390"

    def shutdown(self) -> None:
        FakeLocal.stopped += 1


@pytest.fixture
def fake_ray(monkeypatch):
    """``start_ray`` joins "10.0.0.9:6379" (``--local``: the real ``start_ray`` with a fake local
    cluster); the session is ``session[0]``; ``_run`` raises :class:`Reached` (or, with
    ``returns[0]``, returns: a clean stop)."""
    from deepshare.runtime import localcluster

    session: list[str | None] = [B.session]
    returns = [False]
    real_start = service.start_ray

    def start(config, cleanup, local_stopped=None):  # type: ignore[no-untyped-def]
        return real_start(config, cleanup, local_stopped) if config.local_nodes is not None else "10.0.0.9:6379"

    def run(*_a, **_k):  # type: ignore[no-untyped-def]
        if not returns[0]:
            raise Reached()

    monkeypatch.setattr(localcluster, "LocalCluster", FakeLocal)
    monkeypatch.setattr(service, "start_ray", start)
    monkeypatch.setattr(service, "current_session", lambda: session[0])
    monkeypatch.setattr(service, "_run", run)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    return session, returns


def _start(state: Path, **config: object) -> None:
    from deepshare.policies import make_policy

    run_scheduler(ServiceConfig(state_dir=str(state), port=0, **config),  # type: ignore[arg-type]
                  make_policy("fifo+consolidated"), announce=lambda _line: None, stop=threading.Event(),
                  handle_signals=False)


def _journal_with_runs_on(state: Path, cluster: RayCluster) -> str:
    journal = Journal(state)
    job = _running(journal)[0]
    cluster_guard.record(journal, cluster)
    journal.close()
    return job


def test_a_start_on_another_cluster_exits_2_in_one_line_and_changes_nothing(tmp_path, capsys, fake_ray, A):
    pytest.importorskip("ray")
    state = tmp_path / "state"
    job = _journal_with_runs_on(state, A)
    rc = main(["scheduler", "start", "--address", "10.0.0.9:6379", "--port", "0", "--state", str(state),
               "--policy", "fifo+consolidated"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"({job}) were launched on another Ray cluster, {A.session} at {A.address}, which still answers" in err
    journal = Journal(state)
    assert recorded(journal) == A and journal.get(job).state is JobState.RUNNING
    journal.close()


def test_requeue_lost_runs_goes_on_and_says_so(tmp_path, capsys, fake_ray, A):
    pytest.importorskip("ray")
    state = tmp_path / "state"
    _journal_with_runs_on(state, A)
    with pytest.raises(Reached):
        main(["scheduler", "start", "--address", "10.0.0.9:6379", "--port", "0", "--state", str(state),
              "--policy", "fifo+consolidated", "--requeue-lost-runs"])
    assert "warning: --requeue-lost-runs: the run(s) of 1 job(s) on " in capsys.readouterr().err
    journal = Journal(state)
    assert recorded(journal) == RayCluster(B.session, "10.0.0.9:6379")
    journal.close()


def test_a_clean_stop_of_a_local_cluster_forgets_it_and_a_killed_one_does_not(tmp_path, fake_ray, listening):
    """After a clean stop the next ``--local`` start requeues the running jobs (their runs stopped
    with the cluster); had the scheduler been killed, its cluster (and the runs) may be alive."""
    session, returns = fake_ray
    state = tmp_path / "state"
    journal = Journal(state)
    _running(journal)
    journal.close()
    session[0], returns[0] = A_SESSION, True
    stopped = FakeLocal.stopped
    _start(state, local_nodes=1)  # runs, then stops cleanly
    assert FakeLocal.stopped == stopped + 1
    journal = Journal(state)
    assert recorded(journal) is None
    killed = RayCluster(A_SESSION, listening, local=True)  # as a killed one leaves it, its cluster still up
    cluster_guard.record(journal, killed)
    journal.close()
    session[0] = B.session
    with pytest.raises(DeepShareError, match="Its scheduler was killed"):
        _start(state, local_nodes=1)
    assert FakeLocal.stopped == stopped + 2  # the new local cluster was stopped again
    journal = Journal(state)
    assert recorded(journal) == killed
    journal.close()


def test_a_ray_that_does_not_say_its_session_is_not_checked(tmp_path, fake_ray, A):
    session, _ = fake_ray
    session[0] = None
    state = tmp_path / "state"
    _journal_with_runs_on(state, A)
    with pytest.raises(Reached):
        _start(state, address="10.0.0.9:6379")
    journal = Journal(state)
    assert recorded(journal) == A
    journal.close()


def test_the_session_name_is_rays(ray_local):
    import ray

    name = cluster_guard.current_session()
    assert name == ray.get_runtime_context().get_session_name() and name.startswith("session_")


class PortTaker(FakeLocal):
    """A ``--local`` cluster one of whose processes (a raylet, a worker, its GCS: ports the OS
    picks) takes the port the killed scheduler's dead cluster's GCS had."""

    port = 0
    held: socket.socket | None = None

    def start(self) -> str:
        PortTaker.held = socket.socket()
        PortTaker.held.bind(("127.0.0.1", PortTaker.port))
        PortTaker.held.listen()
        return "127.0.0.1:6390"

    def shutdown(self) -> None:
        super().shutdown()
        if PortTaker.held is not None:
            PortTaker.held.close()


def test_a_dead_local_cluster_is_probed_before_this_starts_own_cluster_takes_its_port(tmp_path, fake_ray, monkeypatch):
    """The killed scheduler's local cluster died with it (nothing answers at its address); the new
    local cluster's processes listen on ports the OS picks, one of which may be that one: probed
    after this start's Ray, its own cluster answered for the dead one and the start was refused."""
    from deepshare.runtime import localcluster

    session, _ = fake_ray
    session[0] = B.session
    dead = _closed_port()
    PortTaker.port = int(dead.rpartition(":")[2])
    monkeypatch.setattr(localcluster, "LocalCluster", PortTaker)
    state = tmp_path / "state"
    _journal_with_runs_on(state, RayCluster(A_SESSION, dead, local=True))
    with pytest.raises(Reached):  # recovery requeues them: their runs died with their cluster
        _start(state, local_nodes=1)
    journal = Journal(state)
    assert recorded(journal) is None  # this start's local cluster, stopped: forgotten
    journal.close()


def test_a_start_after_the_first_cluster_went_away_goes_on_and_warns(tmp_path, capsys, fake_ray):
    pytest.importorskip("ray")
    state = tmp_path / "state"
    gone = RayCluster(A_SESSION, _closed_port())
    _journal_with_runs_on(state, gone)
    with pytest.raises(Reached):
        main(["scheduler", "start", "--address", "10.0.0.9:6379", "--port", "0", "--state", str(state),
              "--policy", "fifo+consolidated"])
    assert (f"warning: the Ray cluster the run(s) of 1 job(s) were launched on, {A_SESSION} at {gone.address}, is "
            "gone: its address refuses connections") in capsys.readouterr().err
    journal = Journal(state)
    assert recorded(journal) == RayCluster(B.session, "10.0.0.9:6379")
    journal.close()


# -- what the probe can and cannot tell -------------------------------------------------------------
FAR = "10.255.0.1:6379"
"""A first cluster's address on another network (never connected to: ``socket.create_connection`` is faked)."""


def _connect_fails(monkeypatch, error: type[OSError], then_answers: int = 0) -> list[float]:
    """``socket.create_connection`` raises ``error`` (after ``then_answers`` failures it answers, when
    non-zero); returns the timeouts it was asked with."""
    asked: list[float] = []

    class Conn:
        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *_a):  # type: ignore[no-untyped-def]
            return False

    def connect(_target, timeout=None):  # type: ignore[no-untyped-def]
        asked.append(timeout)
        if then_answers and len(asked) > then_answers:
            return Conn()
        raise error("faked")

    monkeypatch.setattr(cluster_guard.socket, "create_connection", connect)
    monkeypatch.setattr(cluster_guard.time, "sleep", lambda _s: None)
    return asked


@pytest.mark.parametrize("error", [TimeoutError, socket.gaierror, OSError])  # a timeout, a name, no route
def test_a_cluster_out_of_reach_is_not_taken_as_gone(journal, monkeypatch, error):
    """Nothing answering at a non-loopback address is no sign the cluster is gone: the scheduler
    moved to another network, a firewall drops the packets, a name that does not resolve from
    here. Its runs may go on there; taken as gone, every one of them ran twice."""
    jobs = _running(journal, 2)
    far = RayCluster(A_SESSION, FAR)
    cluster_guard.record(journal, far)
    _connect_fails(monkeypatch, error)
    with pytest.raises(DeepShareError) as refused:
        check_same_cluster(journal, B, requeue_lost_runs=False)
    text = str(refused.value)
    assert f"{A_SESSION} at {FAR}, which cannot be reached from here (no answer): it may be gone, or only out" in text
    assert text.endswith(f"Restart where {FAR} is reachable, with --address {FAR}, to re-attach, or, once their runs "
                         "there are stopped, add --requeue-lost-runs")
    assert recorded(journal) == far and all(journal.get(j).state is JobState.RUNNING for j in jobs)
    assert check_same_cluster(journal, B, requeue_lost_runs=True).why == "flag"  # the operator knows it is gone


def test_a_refused_connection_at_a_far_address_is_a_head_gone(journal, monkeypatch):
    _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, FAR))
    _connect_fails(monkeypatch, ConnectionRefusedError)
    assert check_same_cluster(journal, B, requeue_lost_runs=False).why == "silent"


def test_one_lost_packet_is_not_a_cluster_gone(monkeypatch):
    """A 1 s limit is one SYN (Linux sends a lost one again after 1 s): a single lost packet read
    as "gone" requeued the runs of a cluster that was up."""
    asked = _connect_fails(monkeypatch, TimeoutError, then_answers=1)
    assert cluster_guard.probe(FAR) == cluster_guard.ANSWERS and len(asked) == 2
    assert min(asked) >= 3.0


def test_a_head_restarted_at_its_address_is_gone_not_still_answering(journal, listening):
    """``ray stop; ray start --head`` on the head node (no GCS fault tolerance): a new session at
    the same IP and port. What answers there is this start's own cluster; the first one's GCS
    cannot listen on that endpoint any more. It was refused as "still answers there", telling to
    restart with the very --address it was started with."""
    jobs = _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, listening))
    here = RayCluster(B.session, listening)
    moved = check_same_cluster(journal, here, requeue_lost_runs=False)
    assert moved is not None and moved.why == "replaced" and moved.jobs == jobs
    assert "its address is now served by this start's own cluster" in moved.describe()
    assert recorded(journal) == here


def test_a_name_that_now_leads_to_this_cluster_is_refused_saying_so(journal, listening):
    """A host name (Ray records the name it was given, e.g. a KubeRay head service's) that now leads
    to this start's own cluster says nothing of the first one: recreated under that name (gone) or
    the name repointed while it runs on. Refused, without telling to restart with the same --address."""
    _running(journal)
    named = "localhost:" + listening.rpartition(":")[2]
    cluster_guard.record(journal, RayCluster(A_SESSION, named))
    with pytest.raises(DeepShareError) as refused:
        check_same_cluster(journal, RayCluster(B.session, named), requeue_lost_runs=False)
    text = str(refused.value)
    assert f"at {named}, whose address now leads to this start's own cluster, {B.session}: it is gone" in text
    assert f"--address {named}" not in text
    assert check_same_cluster(journal, RayCluster(B.session, named), requeue_lost_runs=True).why == "flag"


def test_a_loopback_address_that_does_not_answer_is_gone(journal, monkeypatch):
    _running(journal)
    cluster_guard.record(journal, RayCluster(A_SESSION, "127.0.0.1:6399", local=True))
    _connect_fails(monkeypatch, TimeoutError)
    assert check_same_cluster(journal, B, requeue_lost_runs=False).why == "silent"


def test_no_open_run_no_probe(journal, monkeypatch):
    """A silent address costs seconds to ask: with no run open there is nothing to ask about."""
    cluster_guard.record(journal, RayCluster(A_SESSION, "10.255.255.1:6379"))
    monkeypatch.setattr(cluster_guard, "probe", lambda *_a, **_k: pytest.fail("probed"))
    assert cluster_guard.recorded_answers(journal) is None
    _running(journal)
    monkeypatch.setattr(cluster_guard, "probe", lambda *_a, **_k: cluster_guard.SILENT)
    assert cluster_guard.recorded_answers(journal) == cluster_guard.SILENT
