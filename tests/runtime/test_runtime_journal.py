"""The scheduler's journal: the state machine, run accounting, durability across reopen."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.runtime.cluster import read_cluster
from deepshare.runtime.journal import ALLOWED, TERMINAL, JobState, Journal, TransitionError
from deepshare.runtime.spec import spec_from_json

SPEC = spec_from_json(dict(name="j", gpus=3, model="DLRM", entrypoint="m:f", checkpoint_dir="/c", total_samples=100))


def test_lifecycle_accounting_and_transitions(journal, clock):
    job = journal.submit(SPEC)
    assert (job.job_id, job.state, job.attempt, job.placement) == ("j-1", JobState.QUEUED, 0, None)
    assert journal.submit(SPEC).job_id == "j-2"
    attempt = journal.start_run("j-1", (("node0", 2), ("node1", 1)), 55.0)
    assert attempt == 1
    running = journal.get("j-1")
    assert running.state is JobState.RUNNING and running.placement == (("node0", 2), ("node1", 1))
    journal.record_progress("j-1", 1, 40.0, 4, 12.5, None)
    journal.record_progress("j-1", 0, 99.0, 9, 1.0, None)  # a stale run's report is ignored
    clock.t += 10
    journal.end_run("j-1", 1, JobState.QUEUED, "preempted", preempted=True)
    queued = journal.get("j-1")
    assert (queued.state, queued.preemptions, queued.attained_gpu_s, queued.last_run_s) == (JobState.QUEUED, 1, 30.0, 10.0)
    assert (queued.samples, queued.step, queued.throughput) == (40.0, 4, 12.5)
    assert journal.start_run("j-1", (("node1", 3),), None) == 2
    clock.t += 5
    journal.end_run("j-1", 2, JobState.FINISHED, "finished")
    done = journal.get("j-1")
    assert done.state is JobState.FINISHED and done.finish_time == clock.t and done.attained_gpu_s == 45.0
    runs = journal.runs("j-1")
    assert [(r.attempt, r.placement, r.measured_throughput, r.predicted_throughput, r.start_step, r.end_reason)
            for r in runs] == [(1, (("node0", 2), ("node1", 1)), 12.5, 55.0, 4, "preempted"),
                               (2, (("node1", 3),), None, None, None, "finished")]
    assert [(t.from_state, t.to_state, t.attempt) for t in journal.transitions("j-1")] == [
        (None, JobState.QUEUED, 0), (JobState.QUEUED, JobState.RUNNING, 1), (JobState.RUNNING, JobState.QUEUED, 1),
        (JobState.QUEUED, JobState.RUNNING, 2), (JobState.RUNNING, JobState.FINISHED, 2)]


def test_forbidden_moves_change_nothing(journal):
    journal.submit(SPEC)
    with pytest.raises(TransitionError, match="is queued, expected running"):
        journal.end_run("j-1", 0, JobState.FINISHED, "x")
    journal.start_run("j-1", (("n", 3),), None)
    with pytest.raises(TransitionError, match="is running, expected queued"):
        journal.start_run("j-1", (("n", 3),), None)  # never two runs at once
    with pytest.raises(TransitionError, match="on run 1, not 7"):
        journal.end_run("j-1", 7, JobState.QUEUED, "stale")
    journal.end_run("j-1", 1, JobState.CANCELLED, "cancelled")
    for target in JobState:
        with pytest.raises(TransitionError):
            journal.end_run("j-1", 1, target, "after the end")
    with pytest.raises(TransitionError, match="unknown job"):
        journal.cancel_queued("nope")
    assert len(journal.transitions("j-1")) == 3
    assert all(not ALLOWED[s] for s in TERMINAL)


def test_reopen_keeps_everything(tmp_path, clock):
    j = Journal(tmp_path / "s", clock=clock)
    j.submit(SPEC)
    j.submit(SPEC)
    j.start_run("j-2", (("node0", 3),), 7.0)
    j.cancel_queued("j-1")
    epoch = j.epoch
    j.close()
    clock.t += 100
    again = Journal(tmp_path / "s", clock=clock)
    assert again.epoch == epoch
    assert [(r.job_id, r.state, r.attempt, r.placement) for r in again.jobs()] == [
        ("j-1", JobState.CANCELLED, 0, None), ("j-2", JobState.RUNNING, 1, (("node0", 3),))]
    assert [r.job_id for r in again.jobs(JobState.RUNNING)] == ["j-2"]
    assert again.submit(SPEC).job_id == "j-3"
    again.close()


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception, match="cannot open the journal"):
        Journal(blocker / "state")


def test_journal_is_sqlite_wal(journal, tmp_path):
    db = sqlite3.connect(tmp_path / "state" / "journal.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_cluster_from_ray_nodes():
    nodes = [
        {"NodeID": "aa" * 28, "Alive": True, "Resources": {"GPU": 4.0, "CPU": 1.0}, "NodeManagerAddress": "10.0.0.2",
         "NodeName": "10.0.0.2", "Labels": {"deepshare.io/node-name": "node1", "deepshare.io/fabric": "nvlink",
                                            "deepshare.io/nic-gbps": "200"}},
        {"NodeID": "bb" * 28, "Alive": True, "Resources": {"GPU": 8.0}, "NodeManagerAddress": "10.0.0.1",
         "NodeName": "10.0.0.1", "Labels": {"deepshare.io/node-name": "node0"}},
        {"NodeID": "cc" * 28, "Alive": True, "Resources": {"CPU": 8.0}, "NodeName": "head", "Labels": {}},
        {"NodeID": "dd" * 28, "Alive": False, "Resources": {"GPU": 8.0}, "NodeName": "dead", "Labels": {}},
        {"NodeID": "ee" * 28, "Alive": True, "Resources": {"GPU": 2.0}, "NodeName": "same", "Labels": {}},
        {"NodeID": "ff" * 28, "Alive": True, "Resources": {"GPU": 2.0}, "NodeName": "same", "Labels": {}},
    ]
    state = read_cluster(nodes)
    assert [n.name for n in state.nodes] == ["node0", "node1", "same-eeeeeeee", "same-ffffffff"]
    assert state.topology.capacity == (8, 4, 2, 2)
    assert state.topology.nodes[1].fabric == "nvlink" and state.topology.nodes[1].nic_gbps == 200.0
    assert state.topology.nodes[0].fabric == "pcie" and state.topology.nodes[0].nic_gbps == 40.0
    placement = state.to_placement((("node1", 2), ("node0", 1)))
    assert placement is not None and placement.alloc == ((0, 1), (1, 2))
    assert state.to_alloc(placement) == (("node0", 1), ("node1", 2))
    assert state.to_placement((("dead", 1),)) is None


@pytest.mark.parametrize("label, value", [
    ("nic-gbps", "nan"), ("nic-gbps", "inf"), ("nic-gbps", "5e-324"), ("nic-gbps", "-3"), ("nic-gbps", "fast"),
    ("intra-node-gbps", "1e400"), ("nvlink-gbps", "1e-9"), ("pcie-switches", "inf"), ("pcie-switches", "nan"),
    ("pcie-switches", "0"),
])
def test_a_bad_numeric_node_label_falls_back_to_the_default_and_is_logged_once(label, value, caplog):
    # 'inf' switches raised OverflowError on every tick; 'nan' or 5e-324 Gbit/s made predictions NaN
    from deepshare.core.topology import TESTBED_NODE_TYPE
    from deepshare.runtime import cluster

    cluster._bad_label.cache_clear()
    node = {"NodeID": "aa" * 28, "Alive": True, "Resources": {"GPU": 4.0}, "NodeName": "n",
            "Labels": {"deepshare.io/node-name": "node1", f"deepshare.io/{label}": value}}
    for _ in range(3):  # read every tick: one warning
        made = read_cluster([node]).topology.nodes[0]
    default = {"nic-gbps": TESTBED_NODE_TYPE.nic_gbps, "intra-node-gbps": TESTBED_NODE_TYPE.intra_node_gbps,
               "nvlink-gbps": TESTBED_NODE_TYPE.nvlink_gbps, "pcie-switches": 1}[label]
    assert getattr(made, label.replace("-", "_")) == default
    warned = [r.getMessage() for r in caplog.records if "is not a number from" in r.getMessage()]
    assert len(warned) == 1 and "node1" in warned[0] and f"deepshare.io/{label}" in warned[0]


def test_numeric_node_labels_in_their_domain_are_used():
    node = {"NodeID": "aa" * 28, "Alive": True, "Resources": {"GPU": 4.0}, "NodeName": "n",
            "Labels": {"deepshare.io/nic-gbps": "0.001", "deepshare.io/nvlink-gbps": "0",
                       "deepshare.io/intra-node-gbps": "1e9", "deepshare.io/pcie-switches": "1024"}}
    made = read_cluster([node]).topology.nodes[0]
    # at most one PCIe switch per GPU, as a cluster spec must say: 1024 on 4 GPUs counts as 4
    assert (made.nic_gbps, made.nvlink_gbps, made.intra_node_gbps, made.pcie_switches) == (0.001, 0.0, 1e9, 4)
    node["Resources"]["GPU"] = 1024.0
    assert read_cluster([node]).topology.nodes[0].pcie_switches == 1024


def test_one_scheduler_per_state_folder(tmp_path):
    from deepshare.core.errors import DeepShareError
    from deepshare.runtime.statelock import StateLock

    first = StateLock(tmp_path / "s").acquire()
    with pytest.raises(DeepShareError, match=r"another scheduler \(pid \d+\) is using this state folder"):
        StateLock(tmp_path / "s").acquire()
    first.release()
    StateLock(tmp_path / "s").acquire().release()  # free again once released (or its holder died)


def test_a_client_probing_the_folder_does_not_keep_a_scheduler_from_starting(tmp_path):
    """Every client command with --state takes the folder's lock shared for a moment
    (scheduler_running); a start meeting one waits it out instead of saying another scheduler
    runs. A lock that stays held (a scheduler whose scheduler.lock was removed) still refuses."""
    import fcntl
    import os
    import threading

    from deepshare.core.errors import DeepShareError
    from deepshare.runtime.statelock import StateLock

    state = tmp_path / "s"
    StateLock(state).acquire().release()
    probe = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(probe, fcntl.LOCK_SH)  # a client's probe, held while the start tries
        threading.Timer(0.1, fcntl.flock, (probe, fcntl.LOCK_UN)).start()
        StateLock(state).acquire().release()
        fcntl.flock(probe, fcntl.LOCK_SH)  # held throughout: as a running scheduler's lock is
        with pytest.raises(DeepShareError, match=r"another scheduler is using this state folder \(its scheduler.lock was removed"):
            StateLock(state).acquire()
    finally:
        os.close(probe)


def _hold_write_lock(journal: Journal) -> sqlite3.Connection:
    """Another process's connection holding the journal's write lock (an operator's sqlite3
    shell); the journal waits 50 ms for it, not SQLite's 5 s."""
    journal._db.execute("PRAGMA busy_timeout=50")
    other = sqlite3.connect(journal.dir / "journal.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_transaction_that_cannot_begin_releases_the_journal(tmp_path):
    journal = Journal(tmp_path / "state")  # not closed: on a failure the lock is held for good
    journal.submit(SPEC)
    other = _hold_write_lock(journal)
    failed: list[BaseException] = []

    def submit() -> None:  # as one of the API's worker threads, which lives on afterwards
        try:
            journal.submit(SPEC)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            failed.append(exc)

    writer = threading.Thread(target=submit, daemon=True)
    writer.start()
    writer.join(10)
    other.execute("ROLLBACK")
    other.close()
    assert [type(e) for e in failed] == [sqlite3.OperationalError] and "locked" in str(failed[0])
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.append(len(journal.jobs())), daemon=True)  # the control loop
    reader.start()
    reader.join(5)
    assert seen == [1], "the journal's lock was left held by the thread whose BEGIN failed"
    assert journal.submit(SPEC).job_id == "j-2"


def test_a_commit_that_fails_is_rolled_back_and_releases_the_journal(journal):
    # A deferred foreign key fails at COMMIT, which leaves SQLite's transaction open.
    journal._db.execute("PRAGMA foreign_keys=ON")
    journal._db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    journal._db.execute("CREATE TABLE child (parent INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")
    with pytest.raises(sqlite3.IntegrityError):
        with journal._tx() as db:
            db.execute("INSERT INTO child VALUES (7)")
    assert not journal._db.in_transaction
    assert journal._db.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0
    assert journal.submit(SPEC).job_id == "j-1"  # a next transaction begins


@pytest.mark.parametrize("left", [("-wal", "-shm"), ("-wal",), ("-shm",)])
def test_a_journal_moved_away_without_its_wal_is_not_replaced(tmp_path, left):
    """After a crash the last transactions are in journal.sqlite-wal: a journal moved away
    without it must not get a new journal onto which SQLite replays the stale WAL."""
    state = tmp_path / "state"
    journal = Journal(state)
    journal.submit(SPEC)
    journal._db.execute("PRAGMA wal_autocheckpoint=0")  # as after a crash: the last writes only in the WAL
    journal.submit(SPEC)
    wal, shm = (state / "journal.sqlite-wal").read_bytes(), (state / "journal.sqlite-shm").read_bytes()
    journal._db.close()
    (state / "journal.sqlite").rename(tmp_path / "moved.sqlite")
    for suffix, data in (("-wal", wal), ("-shm", shm)):
        (state / f"journal.sqlite{suffix}").unlink(missing_ok=True)
        if suffix in left:
            (state / f"journal.sqlite{suffix}").write_bytes(data)
    with pytest.raises(DeepShareError) as refused:
        Journal(state)
    message = str(refused.value)
    assert "\n" not in message and "journal.sqlite is missing but its " in message
    assert all(f"journal.sqlite{s}" in message for s in left) and "NAME-wal, NAME-shm" in message
    assert not (state / "journal.sqlite").exists()  # nothing created
    for suffix in left:
        (state / f"journal.sqlite{suffix}").unlink()
    assert Journal(state).jobs() == []  # all three gone: a new, empty journal


def test_refusals_say_to_move_the_journal_with_its_wal_and_shm(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal.sqlite").write_bytes(b"")
    with pytest.raises(DeepShareError, match="move it away with its -wal and -shm files to start with a new journal"):
        Journal(state)


def _raylet(node_id: str, ip: str = "10.0.0.5") -> dict:
    return {"Alive": True, "NodeID": node_id, "NodeManagerAddress": ip, "NodeName": ip, "Resources": {"GPU": 2.0}}


def test_a_node_keeps_its_name_when_a_namesake_joins_or_leaves():
    """Two raylets under one NodeName (one host, or a restarted raylet whose old entry lives on):
    a name that changed read as a lost node, and the next tick tore its jobs down."""
    a, b = _raylet("aaaaaaaa1111"), _raylet("bbbbbbbb2222")
    known: dict[str, str] = {}
    alone = read_cluster([a], known=known)
    assert [n.name for n in alone.nodes] == ["10.0.0.5"]  # a unique name stays plain
    job = ((alone.nodes[0].name, 2),)
    both = read_cluster([a, b], known=known)  # b joins: b is the one suffixed
    assert [n.name for n in both.nodes] == ["10.0.0.5", "10.0.0.5-bbbbbbbb"]
    assert both.to_placement(job) == alone.to_placement(job)
    on_b = (("10.0.0.5-bbbbbbbb", 2),)
    after = read_cluster([b], known=known)  # a leaves: b keeps its name
    assert [n.name for n in after.nodes] == ["10.0.0.5-bbbbbbbb"] and after.to_placement(on_b) is not None
    assert after.to_placement(job) is None  # a is gone


def test_a_placement_under_a_suffixed_name_finds_its_node_after_its_namesake_left():
    """As read by a restarted scheduler (no names remembered): the journal's placement names
    ``<ip>-<id>``, the node is now ``<ip>`` alone."""
    both = read_cluster([_raylet("aaaaaaaa1111"), _raylet("bbbbbbbb2222")])
    job = ((both.nodes[1].name, 2),)
    assert job == (("10.0.0.5-bbbbbbbb", 2),)
    one = read_cluster([_raylet("bbbbbbbb2222")])
    assert [n.name for n in one.nodes] == ["10.0.0.5"] and one.to_placement(job) is not None
    other = read_cluster([_raylet("cccccccc3333")])  # the same IP, another node: not the job's
    assert other.to_placement(job) is None


def test_a_restarted_scheduler_gives_a_reattached_runs_nodes_back_their_journalled_names(monkeypatch):
    """Node a was alone (named ``10.0.0.5``, a run journalled there), then b joined
    (``10.0.0.5-bbbbbbbb``). A restarted scheduler suffixed both, ``10.0.0.5`` was no node and
    the run was torn down as "node lost". Its placement group says which node bundle 0 is on."""
    import ray
    import ray.util

    from deepshare.runtime.launcher import RayLauncher
    from deepshare.runtime.runnames import RunNames

    a, b = _raylet("aaaaaaaa1111"), _raylet("bbbbbbbb2222")
    names = RunNames("0123456789ab")
    groups = {names.pg("j1", 3): {"bundles_to_node_id": {0: "aaaaaaaa1111"}}}
    monkeypatch.setattr(ray, "nodes", lambda: [a, b])
    monkeypatch.setattr(ray.util, "get_placement_group", lambda name: groups[name])
    monkeypatch.setattr(ray.util, "placement_group_table", lambda group: group)
    job = (("10.0.0.5", 2),)
    fresh = RayLauncher(names)
    assert fresh.cluster().to_placement(job) is None  # what a restart read before
    launcher = RayLauncher(names)
    launcher.cluster()  # an API read before the recovery: names given afresh
    launcher.remember("j1", 3, job)
    state = launcher.cluster()
    assert [n.name for n in state.nodes] == ["10.0.0.5", "10.0.0.5-bbbbbbbb"]
    assert state.node("10.0.0.5").node_id == "aaaaaaaa1111" and state.to_placement(job) is not None
    launcher.remember("j9", 1, (("10.0.0.5-bbbbbbbb", 2),))  # a group Ray cannot find: names unchanged
    assert [n.name for n in launcher.cluster().nodes] == ["10.0.0.5", "10.0.0.5-bbbbbbbb"]
