"""Autoscaling in simulation: node pools with prices and limits, and autoscaler policies.

* :mod:`.spec` — the autoscaling spec (node types with price, min/max nodes, provisioning
  time; idle timeout; the contention-aware threshold) and its slot topology;
* :mod:`.pool` — which nodes exist and the billing ledger;
* :mod:`.autoscaler` — the demand-based autoscaler (Ray's behaviour) and the policy wrapper;
* :mod:`.contention_aware` — the autoscaler that scales out instead of co-locating;
* :mod:`.report` — cost, GPU-hours and scale events; :mod:`.run` — one autoscaled simulation.
"""

from deepshare.core.autoscaling.autoscaler import Autoscaler, AutoscaledPolicy, ScaleEvent, TimelinePoint
from deepshare.core.autoscaling.contention_aware import ContentionAwareAutoscaler
from deepshare.core.autoscaling.report import AUTOSCALE_KEYS, AutoscaleReport
from deepshare.core.autoscaling.run import AUTOSCALERS, make_autoscaler, simulate_autoscaled
from deepshare.core.autoscaling.spec import AutoscaleSpec, NodePoolSpec, build_slots, load_autoscale_spec, parse_autoscale_spec

__all__ = [
    "AUTOSCALERS", "AUTOSCALE_KEYS", "AutoscaleReport", "AutoscaleSpec", "Autoscaler", "AutoscaledPolicy",
    "ContentionAwareAutoscaler", "NodePoolSpec", "ScaleEvent", "TimelinePoint", "build_slots",
    "load_autoscale_spec", "make_autoscaler", "parse_autoscale_spec", "simulate_autoscaled",
]
