"""``--local``: a fake multi-node Ray cluster on this machine (fake GPUs; jobs run on CPU with gloo).

A head node without GPUs and ``nodes`` worker nodes, each declaring ``gpus_per_node`` GPUs and
the label ``deepshare.io/node-name: node<i>``, so the scheduler's topology names them node0...
With ``labels`` (``--local-label KEY=V0,V1,...``: one value per node, in node order) node ``i``
also carries ``KEY: V<i>``, so fabric levels read from labels (``--level NAME=KEY``) can be tried
locally: ``--local --nodes 4 --local-label example.com/leaf=l0,l0,l1,l1 --level leaf=example.com/leaf``
makes two leaf domains of two nodes each. An empty value leaves that node without the label.

Every node of it is started with ``node_ip_address=127.0.0.1``: its Ray processes advertise and
listen on loopback only, so the fake cluster (which runs whatever jobs the scheduler launches)
cannot be reached from the network. ``ray.init`` rewrites a loopback address to the machine's
"remotely reachable" IP (where nothing listens then); :func:`deepshare.infra.localray.resolve_loopback_as_self`
turns that off for this driver process only (Ray's own switch for single-machine clusters).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from deepshare.core.errors import DeepShareError
from deepshare.infra.localray import resolve_loopback_as_self
from deepshare.runtime.cluster import NAME_LABEL

NODE_MEMORY = 80 * 1024**2
LOOPBACK = "127.0.0.1"

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
"""A label value, or a label key's name part (Kubernetes' syntax, which Ray enforces)."""
_LABEL_PREFIX = re.compile(r"^(?=.{1,253}\Z)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\Z")
"""A label key's optional DNS-subdomain prefix (``example.com`` in ``example.com/leaf``)."""


def local_labels(values: Sequence[str], nodes: int) -> dict[str, tuple[str, ...]]:
    """``--local-label KEY=V0,V1,...`` values as ``{key: (value of node 0, ...)}``, checked here
    (one value per node, Kubernetes label syntax, not a key Ray or ``--local`` sets) so that a
    mistake is one line before Ray starts."""
    out: dict[str, tuple[str, ...]] = {}
    for text in values:
        key, sep, rest = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise DeepShareError(f"--local-label {text!r}: expected KEY=V0,V1,... (one value per node)")
        prefix, slash, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (slash and not _LABEL_PREFIX.match(prefix)):
            raise DeepShareError(f"--local-label {text!r}: {key!r} is not a label key ([prefix/]name, e.g. "
                                 "example.com/leaf)")
        if key.startswith("ray.io/") or key == NAME_LABEL:
            raise DeepShareError(f"--local-label {text!r}: Ray sets the ray.io/ labels and --local sets {NAME_LABEL}")
        if key in out:
            raise DeepShareError(f"--local-label: {key} given twice")
        labels = tuple(v.strip() for v in rest.split(","))
        if len(labels) != nodes:
            raise DeepShareError(f"--local-label {text!r}: {len(labels)} value(s) for {nodes} node(s); give one per "
                                 "node, in order (an empty one: no label)")
        for v in labels:
            if v and not _LABEL_NAME.match(v):
                raise DeepShareError(f"--local-label {text!r}: {v!r} is not a label value (1-63 letters, digits, "
                                     "'-', '_' or '.', starting and ending with a letter or digit)")
        out[key] = labels
    return out


class LocalCluster:
    """Start with :meth:`start`, stop with :meth:`shutdown`; the driver connects in namespace ``deepshare``."""

    def __init__(self, nodes: int, gpus_per_node: int, cpus_per_node: int = 1,
                 labels: Mapping[str, Sequence[str]] | None = None) -> None:
        if nodes <= 0:
            raise DeepShareError(f"--nodes must be a positive integer, got {nodes}")
        if gpus_per_node <= 0:
            raise DeepShareError(f"--gpus-per-node must be a positive integer, got {gpus_per_node}")
        self.nodes, self.gpus_per_node, self.cpus_per_node = nodes, gpus_per_node, cpus_per_node
        self.labels = {key: tuple(values) for key, values in (labels or {}).items()}
        for key, values in self.labels.items():
            if len(values) != nodes:
                raise DeepShareError(f"--local-label {key}: {len(values)} value(s) for {nodes} node(s)")
        self.cluster: Any = None
        self.handles: list[Any] = []

    def start(self) -> str:
        import logging

        import ray
        from ray.cluster_utils import Cluster

        from deepshare.runtime.launcher import NAMESPACE

        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, num_gpus=0, include_dashboard=False, object_store_memory=NODE_MEMORY,
            node_ip_address=LOOPBACK, dashboard_host=LOOPBACK))
        for i in range(self.nodes):
            self.handles.append(self.add_node(f"node{i}", {k: v[i] for k, v in self.labels.items() if v[i]}))
        self.cluster.wait_for_nodes()
        resolve_loopback_as_self()
        ray.init(address=self.cluster.address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
        return str(self.cluster.address)

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> Any:
        return self.cluster.add_node(num_cpus=self.cpus_per_node, num_gpus=self.gpus_per_node,
                                     object_store_memory=NODE_MEMORY, labels={**(labels or {}), NAME_LABEL: name},
                                     node_ip_address=LOOPBACK)

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None

