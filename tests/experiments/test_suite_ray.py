"""The suite, ``compare`` and ``evaluate`` as Ray tasks on a fake multi-node cluster (``--address``).

One module-scoped ``ray.cluster_utils.Cluster``: a head with no CPUs and two 1-CPU workers, like
``deepshare cluster fake``. What is shown: the JSON is exactly the local run's (a learned policy
whose file the driver read and then deleted included: the workers ran it from the object
store's bytes); a node removed while it runs a task still gives the complete, identical JSON; a
policy that raises is a failed row and a ``"failed"`` entry with its error, locally and on the
cluster alike; a worker that dies is rerun a bounded number of times, then reported lost; a
KeyboardInterrupt in the wait loop cancels the outstanding tasks. Timeouts are guards only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("torch")
from cli_run import cli  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402
from raytools import STARTUP_TIMEOUT_S, ray_tmpdir, start_cluster, stop_cluster  # noqa: E402

from deepshare.cli.ray_address import RERUNS  # noqa: E402
from deepshare.experiments import policy_files, ray_runs  # noqa: E402
from deepshare.experiments.learning_curve import SuiteCurve  # noqa: E402
from deepshare.experiments.ray_runs import Lost, Once, run_tasks  # noqa: E402
from deepshare.experiments.suite import SuiteSpec, run_suite  # noqa: E402
from deepshare.infra import raycompat  # noqa: E402

pytestmark = pytest.mark.slow  # a fake multi-node Ray cluster

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deepshare" / "data" / "policies" / "rl_base_dagger.pt"
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
PLUGIN = '''
import os
import time
from pathlib import Path

from deepshare.policies import make_policy


class FailsOnBigClusters:
    """srsf+packed, except that it raises on clusters of more than 16 GPUs."""

    name = "fails-on-big"

    def __init__(self):
        self.inner = make_policy("srsf+packed")

    def decide(self, view):
        if view.total_gpus > 16:
            raise RuntimeError("boom on a big cluster")
        return self.inner.decide(view)


class SlowWhereMarked:
    """srsf+packed, taking 20 ms a decision (runs of half a second, so that every node gets some); in a
    process with $DS_TEST_MARK (the workers of one node) it touches that file at every decision."""

    name = "slow-where-marked"

    def __init__(self):
        self.inner = make_policy("srsf+packed")

    def decide(self, view):
        mark = os.environ.get("DS_TEST_MARK")
        if mark:
            Path(mark).touch()
        time.sleep(0.02)
        return self.inner.decide(view)
'''


def spec(*learned: str, contention: str = "profiled", jobs_per_node: int = 6) -> SuiteSpec:
    """Two loads on a 2x8 and a 3x8 cluster: four cells, two heuristics and ``learned``."""
    return SuiteSpec(name="ray", jobs_per_node=jobs_per_node, loads=(0.7, 1.3), mixes=("heavy",),
                     clusters=((2, 8), (3, 8)), contention=(contention,), seeds=1,
                     heuristics=("srsf+packed", "las+consolidated"), learned=learned)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The fake cluster, this process its driver; workers and driver import the plugin module."""
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "ds_test_policies.py").write_text(PLUGIN)
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(plugins))
    mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])))
    try:
        with ray_tmpdir("ds-suite-"):
            c = start_cluster(dict(num_cpus=0, object_store_memory=100 * 1024**2),
                              [dict(num_cpus=1, object_store_memory=80 * 1024**2)] * 2,
                              connect=dict(log_to_driver=False))
            try:
                yield c
            finally:
                stop_cluster(c)
    finally:
        mp.undo()


def test_a_suite_on_the_cluster_is_the_local_json_and_learned_files_travel_as_bytes(cluster, tmp_path, monkeypatch):
    own = tmp_path / "driver_only" / "policy.pt"
    own.parent.mkdir()
    own.write_bytes(SHIPPED.read_bytes())
    s = spec(f"rl-base={own}", "rl-hybrid")
    local = run_suite(s).to_json()
    read = policy_files.driver_files

    def read_then_delete(specs):
        found = read(specs)
        own.unlink()  # from here on the path exists nowhere: the runs need the bytes
        return found

    monkeypatch.setattr(policy_files, "driver_files", read_then_delete)
    seen = []
    on_cluster = run_suite(s, on_ray=True, progress=lambda done, n, what: seen.append((done, n))).to_json()
    assert not own.exists()
    assert json.dumps(on_cluster, sort_keys=True) == json.dumps(local, sort_keys=True)
    assert on_cluster["failed"] == [] and len(on_cluster["cells"]) == 4
    assert seen == [(i, 16) for i in range(1, 17)]  # the same progress as the local pool's


def test_a_node_removed_mid_suite_still_gives_the_complete_identical_json(cluster, monkeypatch, tmp_path):
    mark = tmp_path / "a run is on the third node"
    s = SuiteSpec(name="ray", jobs_per_node=6, loads=(0.7, 1.0, 1.3), mixes=("heavy",), clusters=((2, 8), (3, 8)),
                  contention=("profiled",), seeds=1, heuristics=("srsf+packed", "las+consolidated"),
                  learned=("ds_test_policies:SlowWhereMarked",))  # its 6 runs go first, one to each free node
    local = run_suite(s).to_json()
    monkeypatch.setenv("DS_TEST_MARK", str(mark))  # the third node's processes, and only they, carry it
    doomed = cluster.add_node(num_cpus=1, object_store_memory=80 * 1024**2, wait=False)
    monkeypatch.delenv("DS_TEST_MARK")
    raycompat.wait_for_node(cluster, doomed, STARTUP_TIMEOUT_S)  # add_node(wait=True) waits 30 s
    cluster.wait_for_nodes(timeout=STARTUP_TIMEOUT_S)
    warm = ray.remote(num_cpus=1)(lambda: __import__("deepshare.experiments.suite") and 0)
    ray.get(warm.options(scheduling_strategy=NodeAffinitySchedulingStrategy(doomed.node_id, soft=False)).remote(),
            timeout=STARTUP_TIMEOUT_S)  # its worker is up, as the others' are: it takes runs as soon as they come
    real_wait, removed = ray.wait, []

    def wait_then_remove(*args, **kwargs):
        if not removed:  # once a run is under way on the third node, the node goes
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not mark.exists():
                assert time.monotonic() < deadline, "no run reached the third node"
                time.sleep(0.1)
            cluster.remove_node(doomed)
            removed.append(doomed)
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(ray, "wait", wait_then_remove)
    on_cluster = run_suite(s, on_ray=True).to_json()
    assert removed and on_cluster == local and on_cluster["failed"] == []


def test_a_failing_policy_is_a_row_and_an_entry_locally_and_on_the_cluster(cluster, capsys, tmp_path):
    suite = tmp_path / "failing.yaml"
    suite.write_text("name: failing\njobs_per_node: 4\nloads: [1.0]\nmixes: [heavy]\nclusters: [[2, 8], [3, 8]]\n"
                     "contention: [profiled]\nseeds: 1\ndurations: [exact]\nheuristics: [srsf+packed, las+consolidated]\n"
                     "learned: ['ds_test_policies:FailsOnBigClusters']\n")
    docs = {}
    for where, extra in (("local", []), ("cluster", ["--address", cluster.address])):
        rc, out, err = cli(capsys, "evaluate", "--suite", suite, "--allow-imports", "--json", tmp_path / f"{where}.json", *extra)
        assert rc == 1 and "Traceback" not in err, err
        assert "1 of 6 runs failed (first: ds_test_policies:FailsOnBigClusters on load 1 heavy 3x8" in err
        assert "failed: RuntimeError: boom on a" in out  # the cell's row (rich wraps the rest)
        docs[where] = json.loads((tmp_path / f"{where}.json").read_text())
    commands = {where: doc.pop("provenance")["command"] for where, doc in docs.items()}
    assert "--address" in commands["cluster"] and "--address" not in commands["local"]  # where it ran, said
    assert docs["local"] == docs["cluster"]
    doc = docs["cluster"]
    assert doc["failed"] == [{"load": 1.0, "mix": "heavy", "nodes": 3, "gpus_per_node": 8, "contention": "profiled",
                              "seed": 2**31, "durations": "exact", "contention_knowledge": "exact",
                              "policy": "ds_test_policies:FailsOnBigClusters",
                              "error": "RuntimeError: boom on a big cluster"}]
    big = next(c for c in doc["cells"] if c["nodes"] == 3)
    assert big["results"]["ds_test_policies:FailsOnBigClusters"]["avg_jct_s"] is None
    assert big["ratios"]["ds_test_policies:FailsOnBigClusters"] is None
    summary = doc["summary"]["ds_test_policies:FailsOnBigClusters"]
    assert summary["cells"] == 1 and summary["failed_cells"] == 1  # the 2x8 cell, where it ran
    assert ray.is_initialized()  # a connected process keeps its connection


def test_compare_and_evaluate_on_the_cluster_print_the_local_json(cluster, capsys, tmp_path):
    policies = f"srsf+packed,las+consolidated,rl-base={SHIPPED}"
    for command in (["compare"], ["evaluate", "--seeds", "2"]):
        docs = []
        for extra in ([], ["--address", cluster.address]):
            rc, _, err = cli(capsys, *command, "--trace", TRACE, "--policies", policies, "--json", tmp_path / "r.json",
                             *extra)
            assert rc == 0, err
            docs.append(json.loads((tmp_path / "r.json").read_text()))
        assert docs[0] == docs[1] and len(docs[0]["results"]) == 3


def test_the_learning_curve_scores_on_the_cluster_as_locally(cluster, monkeypatch):
    local = SuiteCurve("tiny", "rl-base").score(SHIPPED)
    assert SuiteCurve("tiny", "rl-base", on_ray=True).score(SHIPPED) == local
    # a training run whose env runners hold every CPU: the tasks would never start, so it scores here
    said = []
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 0.0})
    monkeypatch.setattr(ray_runs, "run_tasks", lambda *a, **k: pytest.fail("Ray tasks with no free CPU"))
    assert SuiteCurve("tiny", "rl-base", progress=said.append, on_ray=True).score(SHIPPED) == local
    assert any("no CPU of the Ray cluster is free" in line for line in said)


def test_a_dead_worker_is_rerun_then_counted_lost(cluster, tmp_path):
    marks = tmp_path / "attempts"
    marks.mkdir()

    def dies_once(i: int, folder: str) -> int:
        import os
        from pathlib import Path

        first = not (Path(folder) / str(i)).exists()
        (Path(folder) / str(i)).touch()
        if first:
            os._exit(1)  # the worker process dies: a system failure, rerun by Ray
        return i * i

    assert dict(run_tasks(dies_once, [(i, str(marks)) for i in range(3)])) == {0: 0, 1: 1, 2: 4}

    def always_dies() -> None:
        import os

        os._exit(1)

    [(index, lost)] = list(run_tasks(always_dies, [()], max_retries=1))
    assert index == 0 and isinstance(lost, Lost) and lost.error.startswith("lost after 1 retries: ")


def test_keyboard_interrupt_in_the_wait_loop_cancels_the_outstanding_tasks(cluster, monkeypatch):
    def slow(i: int, shared: list[int]) -> int:
        import time

        for _ in range(1200 if i else 0):  # a run: Python code, which Ray's cancel interrupts
            time.sleep(0.1)
        return sum(shared)

    real_wait, cancelled, got, interrupted = ray.wait, [], [], []

    def interrupted_wait(*args, **kwargs):
        if got and not interrupted:  # Ctrl-C once the first run is in: two runs are running, one is queued
            interrupted.append(True)
            raise KeyboardInterrupt
        return real_wait(*args, **kwargs)

    def recording_cancel(ref, **kwargs):
        cancelled.append(ref)
        return real_cancel(ref, **kwargs)

    real_cancel = ray.cancel
    monkeypatch.setattr(ray, "wait", interrupted_wait)
    monkeypatch.setattr(ray, "cancel", recording_cancel)
    shared = Once([1, 2, 3])
    with pytest.raises(KeyboardInterrupt):
        for i, value in run_tasks(slow, [(0, shared), (1, shared), (2, shared), (3, shared)]):
            got.append((i, value))
            time.sleep(2)  # the slow ones are on the workers by now
    assert got == [(0, 6)] and len(set(cancelled)) == 3  # a cancel Ray missed is repeated with force
    monkeypatch.undo()
    for ref in set(cancelled):
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(ref, timeout=60)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2  # nothing keeps running


def test_a_run_that_survives_its_cancel_is_cancelled_again_with_force(cluster):
    """Ray's cancel is best effort; a run it misses (here: one that swallows the interrupt) must
    not keep a CPU for its whole length after Ctrl-C."""
    def stubborn(i: int) -> int:
        import time

        end = time.monotonic() + (300 if i else 0)
        while time.monotonic() < end:
            try:
                time.sleep(0.1)
            except KeyboardInterrupt:
                pass
        return i

    runs = run_tasks(stubborn, [(0,), (1,)])
    assert next(runs) == (0, 0)
    time.sleep(3)  # the stubborn one is running
    started = time.monotonic()
    runs.close()  # what Ctrl-C in the caller's loop does
    assert time.monotonic() - started < ray_runs.CANCEL_GRACE_S + 10
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2


def test_the_help_states_the_reruns():
    assert RERUNS == ray_runs.MAX_RETRIES
