"""What an autoscaled run cost: the simulator's report plus dollars, GPU-hours and scale events.

Definitions (all exact sums over node instances, no sampling):

* the run's **horizon** ends at ``end_s`` = the later of the last job's finish and the last
  node termination (nodes above ``min_nodes`` idle out after the trace; min nodes stay);
* **cost_usd** = sum over instances of price x (termination or end - request) / 3600: billed
  like a cloud, from the request (boot time included) until termination;
* **gpu_hours** = the same sum with GPUs instead of price; **busy_gpu_hours** = GPU-hours
  allocated to jobs; **idle_gpu_hours** = gpu_hours - busy_gpu_hours (boot time included);
* **gpu_util** (replacing the simulator's, which divides by the largest possible cluster) =
  busy_gpu_hours / gpu_hours, and **useful_util** and **fragmentation_share** over gpu_hours alike; **scale_ups** = nodes requested for demand (at t = 0 too; the
  min nodes the cluster starts with are not counted); **scale_downs** = nodes terminated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deepshare.core.autoscaling.autoscaler import Autoscaler, ScaleEvent, TimelinePoint
from deepshare.core.autoscaling.pool import Instance
from deepshare.core.metrics import MetricsReport

AUTOSCALE_KEYS = ("cost_usd", "gpu_hours", "idle_gpu_hours", "scale_ups", "scale_downs")


@dataclass(frozen=True)
class AutoscaleReport:
    autoscaler: str
    metrics: MetricsReport
    end_s: float
    cost_usd: float
    gpu_hours: float
    busy_gpu_hours: float
    idle_gpu_hours: float
    scale_ups: int
    scale_downs: int
    max_nodes_up: int
    instances: tuple[Instance, ...]
    events: tuple[ScaleEvent, ...]
    timeline: tuple[TimelinePoint, ...]

    def to_dict(self) -> dict[str, object]:
        """The simulator report's keys plus the autoscaling ones (the ``--json`` document)."""
        doc = self.metrics.to_dict()
        doc.update(
            autoscaler=self.autoscaler,
            cost_usd=self.cost_usd,
            gpu_hours=self.gpu_hours,
            busy_gpu_hours=self.busy_gpu_hours,
            idle_gpu_hours=self.idle_gpu_hours,
            scale_ups=self.scale_ups,
            scale_downs=self.scale_downs,
            max_nodes_up=self.max_nodes_up,
            end_s=self.end_s,
        )
        return doc


def build_autoscale_report(autoscaler: Autoscaler, metrics: MetricsReport) -> AutoscaleReport:
    instances = tuple(autoscaler.pool.instances)
    finishes = [r.finish_s for r in metrics.records if r.finish_s is not None]
    ends = [i.terminated_s for i in instances if i.terminated_s is not None]
    end = max([0.0, *finishes, *ends])
    cost = sum(i.price_usd_per_hour * i.billed_s(end) for i in instances) / 3600.0
    gpu_s = sum(i.gpus * i.billed_s(end) for i in instances)
    busy_s = sum(r.gpu_time_s for r in metrics.records)
    util = busy_s / gpu_s if gpu_s > 0 else 0.0
    useful_s = metrics.useful_util * autoscaler.slots.topology.total_gpus * metrics.makespan_s  # the simulator's: over every slot
    return AutoscaleReport(
        autoscaler=autoscaler.name,
        metrics=replace(metrics, gpu_util=util, useful_util=useful_s / gpu_s if gpu_s > 0 else 0.0,
                        fragmentation_share=metrics.fragmentation_gpu_s / gpu_s if gpu_s > 0 else 0.0),
        end_s=end,
        cost_usd=cost,
        gpu_hours=gpu_s / 3600.0,
        busy_gpu_hours=busy_s / 3600.0,
        idle_gpu_hours=(gpu_s - busy_s) / 3600.0,
        scale_ups=autoscaler.scale_ups,
        scale_downs=autoscaler.scale_downs,
        max_nodes_up=max((p.up_nodes for p in autoscaler.timeline), default=0),
        instances=instances,
        events=tuple(autoscaler.events),
        timeline=tuple(autoscaler.timeline),
    )
