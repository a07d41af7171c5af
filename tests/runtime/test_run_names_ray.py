"""Two schedulers (two journals) on one local Ray: neither touches the other's runs.

Every journal numbers its jobs from ``<name>-1``. With Ray names made of the job and attempt
alone, scheduler B's launch of its own ``t-1`` failed on "name already exists" and its clean-up
removed scheduler A's running ``t-1`` by that name (A's job went running -> lost). Runs now carry
their journal's instance id; a failed launch removes only what it created; and a journal an
older version wrote re-attaches to its runs launched under the old names."""

from __future__ import annotations

import sqlite3

import pytest

ray = pytest.importorskip("ray")
from raytools import ray_tmpdir, start_ray  # noqa: E402

from deepshare.runtime.cluster import current_cluster  # noqa: E402
from deepshare.runtime.journal import JOURNAL_FILE, JobState, Journal  # noqa: E402
from deepshare.runtime.launcher import NAMESPACE, LaunchError, LaunchSettings, RayLauncher, RunPhase  # noqa: E402
from deepshare.runtime.loop import ControlLoop  # noqa: E402
from deepshare.runtime.runnames import RunNames  # noqa: E402
from deepshare.runtime.spec import spec_from_json  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray with fake GPUs and real worker actors


@pytest.fixture(scope="module")
def gpus():
    ray.shutdown()  # one connection per process: the shared instance restarts on its next use
    with ray_tmpdir("ds-names-"):
        start_ray(num_gpus=4, namespace=NAMESPACE)
        try:
            yield current_cluster()
        finally:
            ray.shutdown()


def spec(tmp_path):  # type: ignore[no-untyped-def]
    return spec_from_json(dict(name="t", gpus=1, model="DLRM", command=["/bin/sleep", "300"],
                               checkpoint_dir=str(tmp_path / "ckpt")))


def start(launcher: RayLauncher, journal: Journal, job_id: str, cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    node = cluster.nodes[0].name
    attempt = journal.start_run(job_id, ((node, 1),), None)
    launcher.launch(job_id, attempt, journal.get(job_id).spec, [(node, 1)], cluster,
                    LaunchSettings(pg_timeout_s=60, rpc_timeout_s=60, log_dir=str(journal.dir)), str(tmp_path))


def test_a_second_scheduler_runs_its_t_1_beside_the_first_ones_and_removes_only_its_own(gpus, tmp_path):
    a, b = Journal(tmp_path / "a"), Journal(tmp_path / "b")
    on_a, on_b = RayLauncher(a.run_names), RayLauncher(b.run_names)
    try:
        job = a.submit(spec(tmp_path)).job_id
        assert b.submit(spec(tmp_path)).job_id == job == "t-1"
        start(on_a, a, job, gpus, tmp_path)
        start(on_b, b, job, gpus, tmp_path)  # failed on "name already exists", and removed A's run
        assert on_a.poll(job, 1, 1).phase is RunPhase.RUNNING
        assert on_b.poll(job, 1, 1).phase is RunPhase.RUNNING
        on_b.teardown(job, 1, 1)
        assert not on_b.exists(job, 1, 1)
        assert on_a.exists(job, 1, 1) and on_a.poll(job, 1, 1).phase is RunPhase.RUNNING
        # B restarted: its recovery requeues its own t-1 and never re-attaches to A's
        assert ControlLoop(b, None, None, None, None).recover() == ([], [job])  # type: ignore[arg-type]
        assert on_a.poll(job, 1, 1).phase is RunPhase.RUNNING
        # A launch that fails (here: the same names again, as a stale copy of A's journal would
        # make them) removes only what it created, not the run of that name
        with pytest.raises(LaunchError):
            RayLauncher(a.run_names).launch(job, 1, a.get(job).spec, [(gpus.nodes[0].name, 1)], gpus,
                                            LaunchSettings(pg_timeout_s=60, rpc_timeout_s=60), str(tmp_path))
        assert on_a.exists(job, 1, 1) and on_a.poll(job, 1, 1).phase is RunPhase.RUNNING
    finally:
        on_a.teardown("t-1", 1, 1)
        on_b.teardown("t-1", 1, 1)
        a.close()
        b.close()


def test_after_the_upgrade_a_restart_re_attaches_to_runs_launched_under_the_old_names(gpus, tmp_path):
    state = tmp_path / "old"
    journal = Journal(state)
    job = journal.submit(spec(tmp_path)).job_id
    old_names = RunNames("0" * 12, frozenset({(job, 1)}))  # ds-<job>-a<attempt>: an older version's names
    start(RayLauncher(old_names), journal, job, gpus, tmp_path)
    journal.close()
    db = sqlite3.connect(state / JOURNAL_FILE)
    db.execute("DELETE FROM meta WHERE key IN ('instance', 'legacy_runs')")  # as the older version wrote it
    db.commit()
    db.close()
    upgraded = Journal(state)
    try:
        loop = ControlLoop(upgraded, None, None, None, None)  # type: ignore[arg-type]
        assert loop.recover() == ([job], [])
        assert upgraded.get(job).state is JobState.RUNNING
        assert loop.launcher.poll(job, 1, 1).phase is RunPhase.RUNNING
    finally:
        RayLauncher(old_names).teardown(job, 1, 1)
        upgraded.close()
