"""The live scheduler on a fake multi-node Ray cluster (``ray.cluster_utils.Cluster``, fake GPUs).

Jobs run the torch-free ``step_job.py``: the job API and ``result.json`` of the example DDP job,
at about 0.05 CPU-second a rank instead of 5 (a DDP rank imports torch and joins a gloo group).
The one multi-node gang, 5 GPUs over both nodes, is the example DDP MLP itself (gloo on CPU), so
a real DDP job runs across Ray nodes in the placement the policy chose. The example job's own
resume is checked exactly, in-process, in ``test_job_api.py``. The in-process tests tick a
:class:`ControlLoop` from the test thread, so every decision can be compared with what reached
Ray; the restart test runs the real ``deepshare scheduler start`` in a subprocess and SIGKILLs it.
Timeouts are guards only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")
from ray.util.placement_group import placement_group_table  # noqa: E402
from raytools import ray_tmpdir, start_cluster, stop_cluster  # noqa: E402

from deepshare.core.contention import make_contention  # noqa: E402
from deepshare.core.types import Decision, Launch, Migrate, Placement  # noqa: E402
from deepshare.core.workloads import default_catalog  # noqa: E402
from deepshare.policies import make_policy  # noqa: E402
from deepshare.runtime import launcher  # noqa: E402
from deepshare.runtime.cluster import NAME_LABEL, current_cluster  # noqa: E402
from deepshare.runtime.journal import JobState, Journal  # noqa: E402
from deepshare.runtime.loop import ControlLoop, LoopConfig, TickReport  # noqa: E402
from deepshare.runtime.spec import spec_from_json  # noqa: E402
from polling import wait_for  # noqa: E402

pytestmark = pytest.mark.slow  # a fake multi-node Ray cluster and real DDP jobs

ROOT = Path(__file__).resolve().parents[2]
NODE = dict(num_cpus=1, num_gpus=4, object_store_memory=80 * 1024**2)
STEP_JOB = Path(__file__).resolve().with_name("step_job.py")




@pytest.fixture(scope="module")
def cluster():
    with ray_tmpdir("ds-rt-"):
        c = start_cluster(dict(num_cpus=1, num_gpus=0, object_store_memory=80 * 1024**2),
                          [dict(NODE, labels={NAME_LABEL: f"node{i}"}) for i in range(2)],
                          connect=dict(namespace="deepshare", log_to_driver=False))
        try:
            yield c
        finally:
            stop_cluster(c)


def spec(name: str, gpus: int, ckpt: Path, steps: int, sleep: float = 0.0, model: str = "GraphSage",
         every: int = 25, ddp: bool = True) -> Any:
    """The example DDP job, or with ``ddp=False`` the torch-free step job (same job API, same
    ``result.json``) for the tests whose subject is the scheduler."""
    args = ["--steps", str(steps), "--batch", "8", "--step-sleep", str(sleep), "--checkpoint-every", str(every),
            "--report-every", "5"]
    program = dict(entrypoint="examples.jobs.ddp_mlp:main", args=args) if ddp else \
        dict(command=[sys.executable, str(STEP_JOB), *args])
    return spec_from_json(dict(
        name=name, gpus=gpus, model=model, **program,
        checkpoint_dir=str(ckpt), working_dir=str(ROOT), total_samples=steps * 8 * gpus,
    ))


def make_loop(journal: Journal, policy: Any, metrics: Any = None) -> ControlLoop:
    return ControlLoop(journal, policy, default_catalog(), make_contention("profiled"),
                       LoopConfig(interval_s=0.2, preempt_grace_s=30.0), cluster_fn=current_cluster, metrics=metrics)


def result(journal: Journal, job_id: str) -> dict:
    return json.loads((Path(journal.run_names.checkpoint_dir(journal.get(job_id).spec, job_id)) / "result.json").read_text())


def drive(loop: ControlLoop, until: Callable[[], bool], timeout: float = 120.0,
          on_tick: Callable[[TickReport], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            pytest.fail(f"jobs not done after {timeout:g} s: "
                        f"{[(j.job_id, j.state.value, j.error) for j in loop.journal.jobs()]}")
        report = loop.tick()
        if on_tick is not None:
            on_tick(report)
        time.sleep(loop.config.interval_s)


def all_done(journal: Journal) -> Callable[[], bool]:
    return lambda: all(j.state is JobState.FINISHED for j in journal.jobs())


def test_four_jobs_follow_the_learned_policy_and_finish(cluster, tmp_path):
    journal = Journal(tmp_path / "state")
    policy = make_policy("rl-hybrid")
    loop = make_loop(journal, policy)
    ckpt = tmp_path / "ckpt"
    for name, gpus, model in (("one", 1, "MobileNetV3"), ("two", 2, "GraphSage"), ("one-more", 1, "DLRM"),
                              ("five", 5, "Transformer-XL")):
        # the 5-GPU gang spans both nodes: a real DDP job (gloo across Ray nodes); the others step
        journal.submit(spec(name, gpus, ckpt, steps=30, model=model, ddp=name == "five"))
    launches: list[tuple[str, Placement]] = []
    capacity = dict(zip((n.name for n in current_cluster().nodes), current_cluster().topology.capacity))

    def check(report: TickReport) -> None:
        cluster_state = current_cluster()
        assert report.error is None
        held = {name: 0 for name in capacity}
        for job in journal.jobs(JobState.RUNNING):
            for name, g in job.placement:
                held[name] += g
        assert all(held[n] <= capacity[n] for n in capacity), held  # never more than a node's GPUs
        if report.decision is None:
            return
        for launch in report.decision.launch:
            assert launch.job_id in report.launched
            launches.append((launch.job_id, launch.placement))
            job = journal.get(launch.job_id)
            alloc = cluster_state.to_alloc(launch.placement)
            assert job.placement == alloc  # the journal holds exactly the policy's placement
            table = placement_group_table(ray.util.get_placement_group(journal.run_names.pg(job.job_id, job.attempt)))
            assert [b.get("GPU") for b in table["bundles"].values()] == [float(g) for _, g in alloc]
            assert [table["bundles_to_node_id"][i] for i in range(len(alloc))] == \
                [cluster_state.node(name).node_id for name, _ in alloc]  # ...and so does Ray

    drive(loop, all_done(journal), on_tick=check)
    assert sorted(j for j, _ in launches) == ["five-4", "one-1", "one-more-3", "two-2"]
    assert dict(launches)["five-4"].num_nodes == 2  # 5 GPUs cannot fit one 4-GPU node
    for job in journal.jobs():
        assert job.state is JobState.FINISHED and job.attempt == 1 and job.preemptions == 0
        out = result(journal, job.job_id)
        assert out["step"] == 30 and [r["start_step"] for r in out["runs"]] == [0]
        assert [r["world_size"] for r in out["runs"]] == [job.spec.gpus]
        (run,) = journal.runs(job.job_id)
        assert run.measured_throughput and run.measured_throughput > 0
        assert run.predicted_throughput and run.predicted_throughput > 0
        assert job.samples == 30 * 8 * job.spec.gpus
    assert not ray.util.placement_group_table() or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())
    journal.close()


class Scripted:
    """A test policy: launch each queued job on ``prefer`` (else the first node that fits), and
    migrate a job once to ``migrate_to`` when ``migrate_when(job_id)`` says so."""

    name = "scripted"

    def __init__(self, prefer: str, migrate_to: str | None = None,
                 migrate_when: Callable[[str], bool] = lambda _: False) -> None:
        self.prefer, self.migrate_to, self.migrate_when = prefer, migrate_to, migrate_when
        self.migrated: set[str] = set()

    def decide(self, view: Any) -> Decision:
        names = [n.name for n in view.topology.nodes]
        free = list(view.free)
        migrate = []
        for job in view.running:
            if self.migrate_to in names and job.job_id not in self.migrated and self.migrate_when(job.job_id):
                target = names.index(self.migrate_to)
                if free[target] >= job.gpus:
                    self.migrated.add(job.job_id)
                    migrate.append(Migrate(job.job_id, Placement(((target, job.gpus),))))
                    free[target] -= job.gpus
        launch = []
        for job in view.queued:
            order = ([names.index(self.prefer)] if self.prefer in names else []) + list(range(len(names)))
            for node in order:
                if free[node] >= job.gpus:
                    free[node] -= job.gpus
                    launch.append(Launch(job.job_id, Placement(((node, job.gpus),))))
                    break
        return Decision(launch=tuple(launch), migrate=tuple(migrate))


def test_migrated_job_resumes_from_its_checkpoint(cluster, tmp_path):
    journal = Journal(tmp_path / "state")
    # 0.05 s a step: 4.5 s between the migration's trigger (step 30) and the job's end, so a
    # loaded machine's slow tick cannot let the job finish before it is migrated
    job_id = journal.submit(spec("mig", 2, tmp_path / "ckpt", steps=120, sleep=0.05, ddp=False)).job_id
    policy = Scripted("node0", migrate_to="node1", migrate_when=lambda j: (journal.get(j).step or 0) >= 30)
    from deepshare.runtime.metrics import SchedulerMetrics

    metrics = SchedulerMetrics("test", "scripted", journal.counts)
    loop = make_loop(journal, policy, metrics)
    drive(loop, all_done(journal))
    job = journal.get(job_id)
    assert job.attempt == 2 and job.preemptions == 1
    sample = metrics.registry.get_sample_value
    assert (sample("deepshare_scheduler_launches_total"), sample("deepshare_scheduler_migrations_total"),
            sample("deepshare_scheduler_preemptions_total"), sample("deepshare_scheduler_launch_failures_total"),
            sample("deepshare_scheduler_jobs_ended_total", {"state": "finished"})) == (2.0, 1.0, 0.0, 0.0, 1.0)
    assert sample("deepshare_scheduler_decision_duration_seconds_count") >= 2  # every tick with jobs decides
    assert (sample("deepshare_scheduler_running_jobs"), sample("deepshare_scheduler_gpus_in_use")) == (0.0, 0.0)
    first, second = journal.runs(job_id)
    assert first.placement == (("node0", 2),) and first.end_reason == "migrating"
    assert second.placement == (("node1", 2),) and second.end_reason == "finished"
    out = result(journal, job_id)
    resumed_at = out["runs"][1]["start_step"]
    assert out["step"] == 120 and out["runs"][0]["start_step"] == 0
    assert resumed_at >= 30  # the step counter continued from the checkpoint, not from zero
    # The scheduler saw the resumed run start there or a few steps later (it polls; the job reports every 5).
    assert second.start_step is not None and resumed_at <= second.start_step < 120
    assert [t.reason for t in journal.transitions(job_id)] == [
        "submitted", "launched", "migrating", "launched", "finished"]
    journal.close()


def test_cancel_running_job_and_recover_lost_run(cluster, tmp_path):
    journal = Journal(tmp_path / "state")
    loop = make_loop(journal, Scripted("node0"))
    job_id = journal.submit(spec("cancel", 1, tmp_path / "ckpt", steps=10_000, sleep=0.01, ddp=False)).job_id
    drive(loop, lambda: (journal.get(job_id).step or 0) >= 5)
    journal.request_cancel(job_id)
    drive(loop, lambda: journal.get(job_id).state is JobState.CANCELLED)
    assert not launcher.exists(job_id, 1, 1, names=journal.run_names)
    # A run journalled as started whose workers never came up (a crash between the journal
    # write and the launch) is removed and requeued on recovery, never left half-running.
    lost = journal.submit(spec("lost", 1, tmp_path / "ckpt", steps=10, ddp=False)).job_id
    journal.start_run(lost, (("node0", 1),), None)
    assert loop.recover() == ([], [lost])
    assert journal.get(lost).state is JobState.QUEUED
    assert journal.transitions(lost)[-1].reason == "scheduler restarted; run not found"
    journal.cancel_queued(lost)
    journal.close()


def test_node_death_requeues_and_resumes(cluster, tmp_path):
    extra = cluster.add_node(**NODE, labels={NAME_LABEL: "node2"})
    cluster.wait_for_nodes()
    journal = Journal(tmp_path / "state")
    loop = make_loop(journal, Scripted("node2"))
    job_id = journal.submit(spec("survivor", 1, tmp_path / "ckpt", steps=200, sleep=0.04, every=20, ddp=False)).job_id
    drive(loop, lambda: (journal.get(job_id).step or 0) >= 45)
    assert journal.get(job_id).placement == (("node2", 1),)
    cluster.remove_node(extra)
    drive(loop, all_done(journal))
    job = journal.get(job_id)
    first, second = journal.runs(job_id)
    assert first.placement == (("node2", 1),) and "requeued" in (first.end_reason or "")
    assert second.placement[0][0] in ("node0", "node1")
    out = result(journal, job_id)
    assert out["step"] == 200
    resumed_at = out["runs"][1]["start_step"]
    assert resumed_at >= 40 and resumed_at % 20 == 0  # its last periodic checkpoint
    assert job.preemptions == 0 and job.attempt == 2
    journal.close()


def _http(url: str, state: Path, method: str = "GET", body: Any = None) -> Any:
    """Call the scheduler with the token it wrote to ``state`` (a new one at every start)."""
    data = None if body is None else json.dumps(body).encode()
    token = (state / "token").read_text().strip()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _start_scheduler(cluster: Any, state: Path, log: Path) -> tuple[subprocess.Popen, str]:
    info = state / "scheduler.json"
    if info.exists():
        info.unlink()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepshare", "scheduler", "start", "--address", cluster.address, "--state", str(state),
         "--port", "0", "--policy", "las+consolidated", "--interval", "0.3"],
        cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
    )
    wait_for("the scheduler's URL", lambda: info.exists() or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, log.read_text()
    doc = json.loads(info.read_text())
    assert doc["pid"] == proc.pid
    return proc, doc["url"]


def test_killed_scheduler_loses_nothing(cluster, tmp_path):
    state, log = tmp_path / "state", tmp_path / "scheduler.log"
    proc, url = _start_scheduler(cluster, state, log)
    try:
        ids = []
        # c cannot fit while a and b run. a's and b's steps are slow enough (8 s a run) that b
        # cannot finish while a's four workers are still starting on a loaded machine: b must still
        # be running when the scheduler is killed, or there is nothing to re-attach. c only has to
        # start after them and finish: 20 quick steps.
        steps = {"a": 100, "b": 100, "c": 20}
        for name, gpus in (("a", 4), ("b", 3), ("c", 2)):
            slow = 0.08 if name != "c" else 0.0
            body = spec(name, gpus, tmp_path / "ckpt", steps=steps[name], sleep=slow, ddp=False).model_dump(mode="json")
            ids.append(_http(f"{url}/v1/jobs", state, "POST", body)["id"])
        a, b, c = ids

        def progressed() -> bool:
            jobs = {j["id"]: j for j in _http(f"{url}/v1/jobs", state)}
            return all(jobs[i]["state"] == "running" and (jobs[i]["step"] or 0) >= 10 for i in (a, b))

        wait_for("a and b to run", progressed)
        assert _http(f"{url}/v1/jobs/{c}", state)["state"] == "queued"  # no GPU left for it
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc, url = _start_scheduler(cluster, state, log)
        assert f"re-attached ['{a}', '{b}']" in log.read_text()
        wait_for("every job to finish", lambda: all(j["state"] == "finished" for j in _http(f"{url}/v1/jobs", state)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    journal = Journal(state)
    assert [j.job_id for j in journal.jobs()] == ids  # nothing lost
    for job_id in ids:
        job = journal.get(job_id)
        assert job.state is JobState.FINISHED and job.attempt == 1  # re-attached, never restarted
        out = result(journal, job_id)
        assert out["step"] == steps[job.spec.name] and [r["start_step"] for r in out["runs"]] == [0]
        assert [t.to_state for t in journal.transitions(job_id)] == [
            JobState.QUEUED, JobState.RUNNING, JobState.FINISHED]
    journal.close()
