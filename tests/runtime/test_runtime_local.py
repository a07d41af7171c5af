"""``deepshare scheduler start --local`` end to end: the real CLI, its own fake cluster, command jobs.

Runs the scheduler as a subprocess with a one-node, two-fake-GPU local cluster; submits with
the real ``deepshare submit``; a command job that succeeds and one whose rank fails; then
SIGTERM, which must stop the scheduler and its fake cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from polling import wait_for  # noqa: E402

pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # a real scheduler subprocess with its own Ray

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deepshare", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def ray_processes(ray_tmp: str) -> list[str]:
    """PIDs of processes whose command line names this test's Ray temp folder."""
    return subprocess.run(["pgrep", "-f", ray_tmp], capture_output=True, text=True).stdout.split()




def test_local_scheduler_runs_command_jobs_and_stops_cleanly(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="ds-rl-")
    state = tmp_path / "state"
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    log = open(tmp_path / "scheduler.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepshare", "scheduler", "start", "--local", "--nodes", "1", "--gpus-per-node", "2",
         "--port", "0", "--state", str(state), "--interval", "0.3", "--policy", "fifo+consolidated"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for("the scheduler", lambda: (state / "scheduler.json").exists() or proc.poll() is not None)
        assert proc.poll() is None, (tmp_path / "scheduler.log").read_text()
        url = json.loads((state / "scheduler.json").read_text())["url"]
        assert ray_processes(ray_tmp)  # the fake cluster runs (so the check at the end can fail)
        ok_code = "from deepshare import job; job.report(samples=5, throughput=2.5, step=5); print('rank', job.rank())"
        specs = {
            "ok": {"command": [sys.executable, "-c", ok_code], "gpus": 2},
            "bad": {"command": [sys.executable, "-c", "import sys; print('boom on purpose'); sys.exit(3)"], "gpus": 1},
        }
        ids = {}
        for name, extra in specs.items():
            path = tmp_path / f"{name}.yaml"
            path.write_text(json.dumps({"name": name, "model": "DLRM", "checkpoint_dir": "ckpt", **extra}))
            done = run_cli("submit", "--url", url, "--state", str(state), str(path))
            assert done.returncode == 0, done.stderr
            ids[name] = done.stdout.split()[1]
        # A second scheduler on the same state folder is refused (one journal, one scheduler).
        second = run_cli("scheduler", "start", "--local", "--state", str(state), "--port", "0")
        assert second.returncode == 2 and "another scheduler" in second.stderr and "Traceback" not in second.stderr

        def jobs() -> dict:
            listed = run_cli("jobs", "--state", str(state), "--json", "-")  # URL and token from the state folder
            return {j["id"]: j for j in json.loads(listed.stdout)}

        final = wait_for("both jobs to end", lambda: (j := jobs()) and all(
            j[i]["state"] in ("finished", "failed") for i in ids.values()) and j)
        ok, bad = final[ids["ok"]], final[ids["bad"]]
        assert ok["state"] == "finished" and ok["step"] == 5 and ok["measured_throughput"] == 2.5
        assert ok["predicted_throughput"] > 0
        assert bad["state"] == "failed" and "exited with status 3" in bad["error"] and "boom on purpose" in bad["error"]
        table = run_cli("jobs", "--url", url, "--state", str(state))
        assert table.returncode == 0 and ids["ok"] in table.stdout and "finished" in table.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
    assert rc == 0
    assert ray_processes(ray_tmp) == []  # the fake cluster stopped with the scheduler
    shutil.rmtree(ray_tmp, ignore_errors=True)
