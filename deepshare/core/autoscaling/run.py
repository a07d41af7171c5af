"""One autoscaled simulation: slot topology + autoscaler + wrapped policy -> AutoscaleReport."""

from __future__ import annotations

from typing import Callable, Sequence

from deepshare.core.autoscaling.autoscaler import Autoscaler, AutoscaledPolicy
from deepshare.core.autoscaling.contention_aware import ContentionAwareAutoscaler
from deepshare.core.autoscaling.fixed import FixedCluster
from deepshare.core.autoscaling.report import AutoscaleReport, build_autoscale_report
from deepshare.core.autoscaling.spec import AutoscaleSpec, Slots, build_slots
from deepshare.core.contention import ContentionModel
from deepshare.core.simulator import PolicyLike, SimConfig, Simulator
from deepshare.core.errors import DeepShareError
from deepshare.core.history import JobHistory
from deepshare.core.information import EXACT, InformationModel
from deepshare.core.types import JobSpec
from deepshare.core.workloads import Catalog, default_catalog

AUTOSCALERS: dict[str, tuple[Callable[[AutoscaleSpec, Slots], Autoscaler], str]] = {
    "demand": (Autoscaler, "Ray's behaviour: scale up for unmet GPU demand, down after the idle timeout"),
    "contention-aware": (
        ContentionAwareAutoscaler,
        "demand scaling, but scale out rather than co-locate above max_slowdown while it may still scale",
    ),
    "fixed": (FixedCluster, "no autoscaling: max_nodes of every type up for the whole run (the reference)"),
}


def make_autoscaler(name: str, spec: AutoscaleSpec, slots: Slots) -> Autoscaler:
    if name not in AUTOSCALERS:
        raise DeepShareError(f"unknown autoscaler {name!r}; expected one of {', '.join(AUTOSCALERS)}")
    return AUTOSCALERS[name][0](spec, slots)


def simulate_autoscaled(
    spec: AutoscaleSpec,
    jobs: Sequence[JobSpec],
    policy: PolicyLike,
    autoscaler: str,
    contention: ContentionModel,
    catalog: Catalog | None = None,
    config: SimConfig = SimConfig(),
    information: InformationModel = EXACT,
    history: JobHistory | None = None,
) -> tuple[AutoscaleReport, Simulator]:
    """Run ``policy`` under ``autoscaler`` (a name in :data:`AUTOSCALERS`) on ``spec``'s pools;
    ``information`` and ``history`` are the :class:`~deepshare.core.simulator.Simulator`'s."""
    slots = build_slots(spec)
    scaler = make_autoscaler(autoscaler, spec, slots)
    sim = Simulator(slots.topology, jobs, contention, catalog=catalog or default_catalog(), config=config, control=scaler,
                    information=information, history=history)
    metrics = sim.run(AutoscaledPolicy(policy, scaler))
    return build_autoscale_report(scaler, metrics), sim
