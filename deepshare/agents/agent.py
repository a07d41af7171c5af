"""``NodeAgent``: the Ray actor that samples one node's probes and reports to the monitor.

Exactly one per node: the monitor creates it with a hard ``NodeAffinitySchedulingStrategy`` on
that node, under a name derived from the Ray node id (``get_if_exists``), so a second start
finds the first. ``max_restarts=-1`` and ``max_task_retries=-1``: Ray restarts a crashed agent
and re-runs its constructor, which is why the constructor starts the sampling thread (the one
thing it starts; the thread only reads local counters). Each sample becomes one
:class:`~deepshare.agents.report.NodeReport`, buffered locally (bounded, :meth:`NodeAgent.recent`).
The first two samples (the node's probes, then its first rates) and then one every
``report_interval_s`` (rounded up to whole samples, :class:`~deepshare.agents.sampler.ReportSchedule`)
are sent fire-and-forget to the monitor: each holds the latest rates, and its ``seq`` tells
how many samples were taken since the previous report. Sampling is cheap (tens of
microseconds) and a Ray call is not (about a millisecond of CPU), so reporting less often
than sampling is what keeps an agent's cost near that of an idle Ray worker.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

import ray

from deepshare.agents.config import default_report_interval
from deepshare.agents.probes.base import Probe, UnavailableProbe
from deepshare.agents.probes.detect import default_probes
from deepshare.agents.report import NodeReport, probe_reason
from deepshare.agents.sampler import ReportSchedule, Sampler
from deepshare.core.topology import Node

log = logging.getLogger(__name__)

ProbeFactory = Callable[[str, "Node | None"], Sequence[Probe]]
"""``factory(node_name, node_spec)`` -> the probes an agent samples (runs inside the agent)."""


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=2)
class NodeAgent:
    """Samples every ``interval_s`` seconds in a daemon thread until :meth:`stop`; reports the
    latest sample to ``monitor`` every ``report_interval_s`` (default ``max(interval_s, 2)``)."""

    def __init__(
        self,
        node: str,
        monitor: Any = None,
        probe_factory: ProbeFactory = default_probes,
        node_spec: Node | None = None,
        interval_s: float = 1.0,
        buffer_size: int = 600,
        report_interval_s: float | None = None,
    ) -> None:
        if report_interval_s is None:
            report_interval_s = default_report_interval(interval_s)
        self._schedule = ReportSchedule(interval_s, report_interval_s)  # raises on a bad pair
        node_id = ray.get_runtime_context().get_node_id()
        try:
            probes = list(probe_factory(node, node_spec))
        except Exception as exc:  # noqa: BLE001 - report it instead of failing the actor for good
            log.exception("agent on %s: building probes failed", node)
            probes = [UnavailableProbe("probes", probe_reason(f"building probes failed: {exc}"))]
        self._sampler = Sampler(node, probes, node_spec, buffer_size, node_id)
        self._monitor = monitor
        self._interval = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"deepshare-agent-{node}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Sample until :meth:`stop`, then release the probes: here, in the thread that uses
        them, so a probe blocked past ``stop``'s wait (an NVML call stuck in the driver) is never
        closed under it (the Ethernet probe then reopened ``/proc/net/dev`` and leaked it)."""
        try:
            self._sample_until_stopped()
        finally:
            self._close()

    def _sample_until_stopped(self) -> None:
        due = time.monotonic()  # the scheduled time of the current tick
        while not self._stop.is_set():
            try:
                with self._lock:
                    report = self._sampler.step()
                if self._monitor is not None and self._schedule.due(due):
                    self._monitor.report.remote(report)
                    self._schedule.sent(due)
            except Exception:  # noqa: BLE001 - keep sampling; the next tick may succeed
                log.exception("agent on %s: sampling or reporting failed", self._sampler.node)
            due += self._interval
            delay = due - time.monotonic()
            if delay < 0:  # fell behind (slow probe): skip the missed ticks
                due, delay = time.monotonic(), 0.0
            self._stop.wait(delay)

    # -- queries -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Node name, Ray node id, process id and probe availability (for tests and status)."""
        return {
            "node": self._sampler.node,
            "node_id": self._sampler.node_id,
            "pid": os.getpid(),
            "probes": [(p.name, p.available, p.reason) for p in self._sampler.probes],
            "interval_s": self._interval,
            "report_period_s": self._schedule.period_s,
        }

    def recent(self, n: int = 1) -> list[NodeReport]:
        """The last ``n`` samples (reports, sent or not) from the bounded buffer, oldest first;
        none for ``n <= 0`` (``[-0:]`` is the whole buffer)."""
        if n <= 0:
            return []
        with self._lock:
            return list(self._sampler.buffer)[-n:]

    def cpu_seconds(self) -> float:
        """CPU time this agent's process used so far (user + system, all threads)."""
        return time.process_time()

    def _close(self) -> None:
        """Close the probes without the lock: this runs in the sampling thread after its last
        step, so no step can overlap it, and a close() that blocks (``nvmlShutdown`` stuck in the
        driver) held the lock and hung every later :meth:`recent`."""
        try:
            self._sampler.close()
        except Exception:  # noqa: BLE001 - nothing is left to sample with anyway
            log.exception("agent on %s: closing the probes failed", self._sampler.node)

    def stop(self) -> None:
        """Stop sampling; the sampling thread releases the probes once its current sample ends
        (waited for up to ``5 x interval + 1`` s). The actor stays until killed."""
        self._stop.set()
        self._thread.join(timeout=5 * self._interval + 1)
