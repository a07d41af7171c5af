"""A private local Ray stays private with another Ray already running on the machine.

``deepshare serve`` and ``deepshare train`` without ``--address`` start their own loopback-only
instance through :func:`deepshare.infra.localray.init_local_ray`. A cluster someone started with
``ray start --head`` advertises itself (``$RAY_ADDRESS``, ``<ray temp dir>/ray_current_cluster``);
``ray.init()`` without an address joins it, which failed ("When connecting to an existing cluster,
num_cpus and num_gpus must not be provided") and, with other arguments, would have attached the
command to a cluster that listens on the network. Here a second Ray is started with its own
temp folder and port, and stopped by its own process group, never with ``ray stop``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from polling import wait_for
from raytools import STARTUP_TIMEOUT_S
from serve_process import free_port

pytestmark = pytest.mark.slow

CHILD = """
import ray
from deepshare.infra.localray import init_local_ray
init_local_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
nodes = ray.nodes()
print(ray.get_runtime_context().gcs_address, len(nodes), ray.cluster_resources().get("CPU"), flush=True)
ray.shutdown()
"""


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group this test started (``ray start`` and the processes it spawned),
    SIGKILL what is left after 5 s (`ray start --block` outlives a SIGTERM for 30 s or more)."""
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(1)  # the group's other members exit after its leader


@pytest.fixture(scope="module")
def foreign_ray() -> Iterator[tuple[str, str]]:
    """(``$RAY_TMPDIR``, GCS address) of a ``ray start --head --num-cpus 1`` of our own."""
    tmp = tempfile.mkdtemp(prefix="ds-foreign-")
    temp_dir = os.path.join(tmp, "ray")
    port = free_port()
    env = dict(os.environ, RAY_TMPDIR=tmp, RAY_gcs_server_port_wait_time_s=str(STARTUP_TIMEOUT_S))
    env.pop("RAY_ADDRESS", None)
    ray_cli = str(Path(sys.executable).with_name("ray"))
    log = open(os.path.join(tmp, "ray-start.log"), "wb")
    proc = subprocess.Popen(
        [ray_cli, "start", "--head", "--num-cpus", "1", "--port", str(port), "--temp-dir", temp_dir,
         "--include-dashboard", "false", "--disable-usage-stats", "--block"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address_file = Path(temp_dir) / "ray_current_cluster"
    try:
        wait_for("ray start --head to write its address", lambda: address_file.is_file() or proc.poll() is not None,
                 timeout=STARTUP_TIMEOUT_S)
        if proc.poll() is not None:
            pytest.fail(f"ray start exited {proc.returncode}:\n{Path(tmp, 'ray-start.log').read_text()[-3000:]}")
        address = wait_for("the address in ray_current_cluster", lambda: address_file.read_text().strip())
        yield tmp, address
    finally:
        _stop_group(proc)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("advertised", ["file", "RAY_ADDRESS"])
def test_a_private_instance_does_not_join_a_cluster_already_running_here(foreign_ray, advertised):
    tmp, foreign = foreign_ray
    env = dict(os.environ, RAY_TMPDIR=tmp)  # the foreign cluster's ray_current_cluster is found here
    env.pop("RAY_ADDRESS", None)
    if advertised == "RAY_ADDRESS":
        env["RAY_ADDRESS"] = foreign
    env["RAY_gcs_server_port_wait_time_s"] = str(STARTUP_TIMEOUT_S)
    for _attempt in range(2):  # one retry: a loaded machine can miss Ray's own start-up deadlines
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                              timeout=STARTUP_TIMEOUT_S * 2)
        if done.returncode == 0 or "timed out during startup" not in done.stderr:
            break
    assert done.returncode == 0, done.stderr[-3000:]
    address, nodes, cpus = done.stdout.split()
    assert address != foreign and address.startswith("127.0.0.1:")  # its own GCS, on loopback
    assert (nodes, float(cpus)) == ("1", 1.0)  # its own single node with the CPU it asked for
