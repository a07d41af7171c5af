"""A fake *autoscaling* multi-node Ray cluster on this machine, that stops only what it started.

Ray's ``AutoscalingCluster`` test helper runs ``ray stop --force``, which kills every Ray
process of the user (other people's test clusters included). This one instead:

* starts the head with ``ray start --head`` in a **new session**, on a free port, with its own
  ``RAY_TMPDIR``, and Ray's fake multi-node node provider (the autoscaler starts and stops
  worker nodes as local processes: its raylets inherit the session), subclassed to give every
  node a ``deepshare.io/node-name`` label (:mod:`deepshare.raycluster.fake_provider`);
* stops by signalling exactly the processes of that session (found in ``/proc``), SIGTERM
  then SIGKILL — never ``ray stop``.

Worker types come from an :class:`~deepshare.core.autoscaling.spec.AutoscaleSpec` (the same
node types the simulator and the cluster YAMLs use); nodes declare fake GPUs, a CPU each, the
``deepshare_fabric_*`` resource and the ``deepshare.io/*`` labels. Linux only (``/proc``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from deepshare.core.atomic import write_text_atomic
from deepshare.core.autoscaling.spec import AutoscaleSpec, NodePoolSpec
from deepshare.core.errors import DeepShareError, shown
from deepshare.infra.raycompat import node_label_syntax_check

HEAD_TYPE = "ray.head.default"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def autoscaling_config(spec: AutoscaleSpec, gcs_address: str, cpus_per_node: int = 1) -> dict[str, object]:
    """The fake provider's cluster config: ``spec``'s node types with fake GPUs and labels; Ray's
    cluster-wide ``max_workers`` is the spec's ``max_workers`` where it sets one (as far as the
    types' ``max_nodes`` add up), else their sum (Ray started ``max_nodes`` whatever the spec's cap)."""
    types: dict[str, object] = {HEAD_TYPE: {"resources": {}, "node_config": {}, "max_workers": 0}}
    for name, t in spec.node_types.items():
        types[name] = {
            "resources": {"CPU": cpus_per_node, "GPU": t.gpus, f"deepshare_fabric_{t.fabric}": 1},
            "labels": node_type_labels(name, t), "node_config": {}, "min_workers": t.min_nodes, "max_workers": t.max_nodes,
        }
    slots = sum(t.max_nodes for t in spec.node_types.values())
    return {
        "cluster_name": "deepshare-fake",
        "max_workers": slots if spec.max_workers is None else min(spec.max_workers, slots),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": spec.idle_timeout_s / 60.0,
        "provider": {"type": "external", "module": "deepshare.raycluster.fake_provider.NamedFakeProvider",
                     "gcs_address": gcs_address, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "use_node_id_as_ip": True},
        "auth": {"ssh_user": "ubuntu"},
        "head_node_type": HEAD_TYPE,
        "available_node_types": types,
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
        "head_start_ray_commands": [], "worker_start_ray_commands": [],
    }


def check_node_types(spec: AutoscaleSpec) -> None:
    """Refuse, naming it, a node type of ``spec`` whose labels Ray would refuse at node start."""
    for name, t in spec.node_types.items():
        node_type_labels(name, t)


def node_type_labels(name: str, t: NodePoolSpec) -> dict[str, str]:
    """The ``deepshare.io/*`` labels of node type ``name``, numbers written exactly (``32.773``,
    ``1000000``: never ``1e+06``, which Ray refuses, nor a price rounded to six digits), checked
    with Ray's label rules: a spec whose node type Ray would refuse at node start (a GPU model
    with a space in it) is one error naming the type and the label, before anything starts."""
    labels = {
        "deepshare.io/gpu-model": t.gpu_model, "deepshare.io/fabric": t.fabric,
        "deepshare.io/nic-gbps": plain_number(t.nic_gbps), "deepshare.io/nvlink-gbps": plain_number(t.nvlink_gbps),
        "deepshare.io/intra-node-gbps": plain_number(t.intra_node_gbps), "deepshare.io/pcie-switches": str(t.pcie_switches),
        "deepshare.io/price-usd-per-hour": plain_number(t.price_usd_per_hour),
    }
    check = node_label_syntax_check()
    named = f"{name}-{NODE_NUMBERS}"  # the fake provider labels each node ``<type>-<k>`` (its longest k here)
    for key, value in (*labels.items(), (NAME_LABEL, named)):
        try:
            check({key: value})
        except ValueError:
            raise DeepShareError(f"node_types.{shown(name)}: Ray refuses the node label {key}={shown(value)} "
                                 "(a label value is at most 63 letters, digits, '-', '_' or '.', starting and ending "
                                 "with a letter or digit)") from None
    return labels


NAME_LABEL = "deepshare.io/node-name"
"""The label :class:`~deepshare.raycluster.fake_provider.NamedFakeProvider` names each node by
(the live scheduler reads it as ``deepshare.runtime.cluster.NAME_LABEL``; this layer cannot import that one)."""
NODE_NUMBERS = 999_999
"""Room checked for the node number in that label (nodes started over one experiment's life)."""


def plain_number(value: float) -> str:
    """``value`` in plain decimal notation, exactly as Python reads it back (no exponent)."""
    value = float(value) + 0.0  # -0.0 -> 0.0: '-0' is no label value
    text = format(Decimal(repr(value)), "f")
    text = text.rstrip("0").rstrip(".") if "." in text else text
    short = repr(value)  # a tiny number's plain form passes 63 characters; '1e-70' is a label value (no '+')
    return short if len(text) > 63 and "+" not in short else text


@dataclass
class FakeAutoscalingCluster:
    spec: AutoscaleSpec
    tmp_dir: Path
    head_cpus: int = 1
    address: str = ""
    _sid: int | None = field(default=None, repr=False)

    def start(self, timeout_s: float = 60.0) -> str:
        """Start the head (the autoscaler then starts the min nodes); returns the GCS address."""
        if not sys.platform.startswith("linux"):
            raise DeepShareError("the fake autoscaling cluster needs Linux (/proc)")
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        ray_config = autoscaling_config(self.spec, self.address)  # a node type Ray refuses: before anything is made
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        config = self.tmp_dir / "autoscaling.json"
        # renamed into place: a symlink planted at the name is replaced, not written through
        write_text_atomic(config, json.dumps(ray_config), "autoscaling config")
        env = dict(os.environ, RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1", RAY_TMPDIR=str(self.tmp_dir),
                   RAY_AUTH_MODE="disabled")  # a loopback test cluster; a ~/.ray/auth_token must not turn tokens on
        cmd = [str(Path(sys.executable).parent / "ray"), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
               f"--num-cpus={self.head_cpus}", "--num-gpus=0", "--include-dashboard=false",
               f"--temp-dir={self.tmp_dir}", f"--autoscaling-config={config}", "--disable-usage-stats"]
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        self._sid = proc.pid  # the session leader's pid is the session id
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.shutdown()
            raise DeepShareError(f"the fake autoscaling cluster's head did not start within {timeout_s:g} s") from None
        if proc.returncode != 0:
            self.shutdown()
            raise DeepShareError(f"ray start failed: {output.strip().splitlines()[-1] if output.strip() else proc.returncode}")
        return self.address

    def processes(self) -> list[int]:
        """Pids of every live process in this cluster's session (head, autoscaler, its nodes, workers)."""
        if self._sid is None:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
            if int(fields[3]) == self._sid and fields[0] != "Z":
                found.append(int(entry.name))
        return found

    def shutdown(self, grace_s: float = 10.0) -> None:
        """SIGTERM this session's processes, SIGKILL what is left after ``grace_s``."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            pids = self.processes()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
            if not self.processes():
                break
        self._sid = None if not self.processes() else self._sid
