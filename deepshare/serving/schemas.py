"""The placement API's request and response bodies (pydantic; FastAPI documents them in OpenAPI).

Pure pydantic, no Ray or FastAPI, so :mod:`deepshare.serving.client` can use them too. Models are
strict (``"8"`` is not a GPU count), reject unknown fields (a typo is an error, not a silently
ignored option) and reject NaN and infinities. Checks that span fields (a running job on an
unknown node, duplicate ids) live in :mod:`deepshare.serving.translate`, which names the field.
Every number has the documented domain of :mod:`deepshare.core.bounds`: durations at most a year,
clock readings at most ``MAX_TIMESTAMP_S``, GPU-seconds at most a year of a job's largest size.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deepshare.core.bounds import MAX_DURATION_S, MAX_GPU_SERVICE_S, MAX_JOB_GPUS, MAX_TIMESTAMP_S
from deepshare.core.fabric import RACK_LEVEL
from deepshare.core.history import HISTORY_WINDOW
from deepshare.core.information import ESTIMATE_FLOOR_S, UNKNOWN_PRIOR_S
from deepshare.core.names import NO_CONTROL_CHARACTERS, NO_CONTROL_CHARACTERS_OR_EMPTY
from deepshare.core.topology import TESTBED_NODE_TYPE
from deepshare.core.topology_plain import pcie_switches_problem
from deepshare.core.topology_spec import DomainName, LinkGbps, OptionalLinkGbps

API_VERSION = "v1"
DEFAULT_REMAINING_S = UNKNOWN_PRIOR_S
"""Run time assumed for a job whose client estimates nothing (SRTF and the learned policies'
features read the remaining time counted down from it)."""
MAX_HISTORY = HISTORY_WINDOW
"""Finished jobs a request may carry (the most recent): what every history-based policy learns from."""
DEFAULT_RESTORE_S = 30.0
"""A request's ``restore_s`` when it gives none: the simulator's default ``preempt_overhead_s``
(:data:`deepshare.core.view.DEFAULT_RESTORE_S`), a literal here so that the schemas, which
the client imports too, pull in neither."""
MAX_RESTORE_S = 1e6
"""The largest ``restore_s`` (seconds), as ``--preempt-overhead-s`` takes."""
DEFAULT_MOVE_S = 30.0
"""A request's ``move_s`` when it gives none: the simulator's default ``migrate_overhead_s``
(:data:`deepshare.core.view.DEFAULT_MOVE_S`), a literal here for the same reason."""
MAX_MOVE_S = 1e6
"""The largest ``move_s`` (seconds), as ``--migrate-overhead-s`` takes."""
REMAINING_DOC = (
    "the client's estimate of the isolated run time left, seconds (never the truth: no cluster knows it); "
    f"default: requested_s minus the time run (attained_gpu_s / GPUs), at least {ESTIMATE_FLOOR_S:g}; "
    f"{UNKNOWN_PRIOR_S:g} minus the time run without requested_s"
)
REQUESTED_DOC = "the job's estimate or time limit of its whole isolated run time, seconds (from its user or a predictor)"
Feature = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS)
LEVEL_DOC = (
    f"a fabric level's name: one of the request's levels, or {RACK_LEVEL!r} (the nodes' racks) when it gives none"
)
RequiredLevel = Field(None, min_length=1, max_length=256, description=(
    f"all of the job's GPUs inside one domain of this level, or it waits ({LEVEL_DOC}; not with preferred_level)"))
PreferredLevel = Field(None, min_length=1, max_length=256, description=(
    f"inside one domain of this level if one has room, else anywhere ({LEVEL_DOC}; not with required_level)"))
SliceSize = Field(None, ge=1, le=MAX_JOB_GPUS, description=(
    "the job's GPUs come in slices of this many, each inside one domain of slice_level (its GPUs a multiple "
    "of it; with slice_level)"))
SliceLevel = Field(None, min_length=1, max_length=256, description=(
    f"the level each slice of slice_size GPUs stays inside ({LEVEL_DOC}; with slice_size)"))

QueueName = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description=(
    "the tenant queue it counts against (with `deepshare serve --tenants`: a queue the tenants file declares; "
    "default: the file's default queue, or its user's / vc's queue under queue_from)"))
PriorityName = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description=(
    "its priority class (with `deepshare serve --tenants`: one the tenants file declares; default: the file's "
    "default_priority)"))

MAX_NODES = 4096
MAX_JOBS = 10_000
MAX_GPUS_PER_NODE = 1024
MAX_LEVELS = 16
HeldGpus = Annotated[int, Field(gt=0, le=MAX_GPUS_PER_NODE)]
"""GPUs a running job holds on one node: 1 to a node's most (a larger number cannot be held, and a
huge one summed per node made the consistency check's message fail with a 500)."""
RackName = Annotated[str, Field(min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS)]
"""A node's rack: 1-256 characters, no control characters. Without levels it is the name of its
domain at the one level (a cluster spec takes any such name, ``dc1/r0`` included: one level's
names are never joined into a path); with levels a label, which may be a path ("pod0/rack3", what
a view's multi-level rack is)."""
"""Fabric levels a request may describe (as many as a cluster spec's)."""

JobId = Field(min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS,
              description="unique across running and pending; no control characters")
ModelName = Field(
    min_length=1, max_length=128, pattern=NO_CONTROL_CHARACTERS,
    description="model name as the workload catalog knows it (e.g. ResNet50, FSDP); unknown names "
    "map to a family proxy",
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class LevelIn(_Body):
    """One level of the request's fabric (:class:`deepshare.core.fabric.Level`), with a cluster
    spec's rules (:class:`deepshare.core.topology_spec.LevelSpec`): the rules that span levels or
    fields (unique names, NVLink only on the lowest, not both uplinks) are checked by
    :mod:`deepshare.serving.translate`, which names the field."""

    name: DomainName = Field(description="the level's name (1-256 characters, no '/'), unique among the levels")
    nvlink: bool = Field(False, description="its domains are NVLink domains spanning nodes (the lowest level only)")
    uplink_gbps: OptionalLinkGbps = Field(0.0, description="each domain's uplink, Gbit/s (0: non-blocking)")
    oversubscription: float = Field(
        0.0, ge=0, le=1e6,
        description="when > 0: each domain's uplink is its nodes' NIC bandwidth over this (2 = 2:1; 0 or at least 1; "
        "not with uplink_gbps)",
    )
    port_gbps: OptionalLinkGbps = Field(
        0.0, description="one uplink switch port, Gbit/s (e.g. 400): the uplink is round(uplink / port_gbps) ports and "
        "each crossing flow is hashed onto one (ECMP); 0: one fat pipe",
    )

    @field_validator("oversubscription")
    @classmethod
    def _a_ratio(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError(f"expected 0 or at least 1 (2 means 2:1), got {value:g}")
        return value


class NodeIn(_Body):
    """One node. Fabric fields default to the original testbed's node (8 x TITAN Xp on PCIe,
    40 Gb/s InfiniBand); they matter to the ``link`` contention model."""

    name: str = Field(min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS,
                      description="unique among the nodes; 1-256 characters, no control characters (as a rack)")
    gpus: int = Field(gt=0, le=MAX_GPUS_PER_NODE)
    free_gpus: int = Field(ge=0, le=MAX_GPUS_PER_NODE, description="at most gpus minus the running jobs' GPUs here")
    fabric: Literal["pcie", "nvlink"] = TESTBED_NODE_TYPE.fabric
    rack: RackName = Field("rack0", description=(
        f"its domain at the one level, {RACK_LEVEL!r}, of a request without levels (1-256 characters, no "
        "control characters); with levels only a label, which may be a path (default: its domains' path above an "
        "NVLink level, as in a cluster spec)"))
    domains: dict[DomainName, DomainName] | None = Field(
        None, max_length=MAX_LEVELS,
        description="level name -> the name of its domain there (1-256 characters, no '/'): one for each of the "
        "request's levels, and only with levels",
    )
    gpu_model: str = Field("unknown", max_length=128, pattern=NO_CONTROL_CHARACTERS_OR_EMPTY, description="no control characters")
    pcie_switches: int = Field(TESTBED_NODE_TYPE.pcie_switches, gt=0, le=64, description=(
        "at most gpus (each switch serves a GPU); when not given, the testbed's 2, cut to gpus"))
    intra_node_gbps: LinkGbps = TESTBED_NODE_TYPE.intra_node_gbps
    nvlink_gbps: OptionalLinkGbps = TESTBED_NODE_TYPE.nvlink_gbps
    nic_gbps: LinkGbps = TESTBED_NODE_TYPE.nic_gbps

    @model_validator(mode="after")
    def _switches_have_gpus(self) -> "NodeIn":
        if "pcie_switches" not in self.model_fields_set:  # the default: a 1-GPU node has one switch
            self.pcie_switches = min(self.pcie_switches, self.gpus)
        problem = pcie_switches_problem(self.gpus, self.pcie_switches)
        if problem:
            raise ValueError(problem)
        return self


class RunningIn(_Body):
    job_id: str = JobId
    model: str = ModelName
    placement: dict[str, HeldGpus] = Field(
        min_length=1, max_length=MAX_NODES,
        description=f"node name -> GPUs held there (each from 1 to {MAX_GPUS_PER_NODE})",
    )
    submitted_at: float = Field(0.0, ge=0, le=MAX_TIMESTAMP_S, description="at most now")
    remaining_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, description=REMAINING_DOC)
    requested_s: float | None = Field(None, gt=0, le=MAX_DURATION_S, description=REQUESTED_DOC)
    attained_gpu_s: float = Field(0.0, ge=0, le=MAX_GPU_SERVICE_S, description="GPU-seconds held so far, this run included (LAS's key)")
    preemptions: int = Field(0, ge=0, le=1_000_000)
    running_for_s: float = Field(0.0, ge=0, le=MAX_DURATION_S, description="seconds since this run started")
    user: str | None = Feature
    group: str | None = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description="a recurring job's tag (same script, parameters, data)")
    vc: str | None = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description="virtual cluster or team")
    required_level: str | None = RequiredLevel
    preferred_level: str | None = PreferredLevel
    slice_size: int | None = SliceSize
    slice_level: str | None = SliceLevel
    queue: str | None = QueueName
    priority: str | None = PriorityName


class PendingIn(_Body):
    job_id: str = JobId
    model: str = ModelName
    gpus: int = Field(gt=0, le=MAX_JOB_GPUS)
    submitted_at: float | None = Field(None, ge=0, le=MAX_TIMESTAMP_S, description="default: now; at most now")
    remaining_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, description=REMAINING_DOC)
    requested_s: float | None = Field(None, gt=0, le=MAX_DURATION_S, description=REQUESTED_DOC)
    attained_gpu_s: float = Field(0.0, ge=0, le=MAX_GPU_SERVICE_S, description="GPU-seconds held in earlier runs")
    preemptions: int = Field(0, ge=0, le=1_000_000)
    queued_since: float | None = Field(
        None, ge=0, le=MAX_TIMESTAMP_S, description="when it last entered the queue, from submitted_at to now; default submitted_at"
    )
    last_run_s: float = Field(0.0, ge=0, le=MAX_DURATION_S, description="length of its last run, if it was preempted")
    user: str | None = Feature
    group: str | None = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description="a recurring job's tag (same script, parameters, data)")
    vc: str | None = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS, description="virtual cluster or team")
    required_level: str | None = RequiredLevel
    preferred_level: str | None = PreferredLevel
    slice_size: int | None = SliceSize
    slice_level: str | None = SliceLevel
    queue: str | None = QueueName
    priority: str | None = PriorityName


class FinishedIn(_Body):
    """A job that finished: what history-based policies (gittins, qssf) learn job lengths from."""

    job_id: str | None = Field(None, min_length=1, max_length=256, pattern=NO_CONTROL_CHARACTERS)
    model: str | None = Field(None, min_length=1, max_length=128, pattern=NO_CONTROL_CHARACTERS)
    gpus: int = Field(gt=0, le=MAX_JOB_GPUS)
    run_s: float = Field(gt=0, le=MAX_DURATION_S, description="seconds it held its GPUs over all its runs")
    finished_at: float = Field(0.0, ge=0, le=MAX_TIMESTAMP_S, description="at most now")
    user: str | None = Feature
    group: str | None = Feature
    vc: str | None = Feature
    requested_s: float | None = Field(None, gt=0, le=MAX_DURATION_S, description="the estimate it came with, if any")


class PlacementRequest(_Body):
    """The cluster now: where should the pending jobs go?"""

    now: float = Field(ge=0, le=MAX_TIMESTAMP_S, description="seconds on the caller's clock (any epoch, same as submitted_at)")
    nodes: list[NodeIn] = Field(min_length=1, max_length=MAX_NODES)
    levels: list[LevelIn] | None = Field(
        None, min_length=1, max_length=MAX_LEVELS,
        description=f"the fabric's levels, lowest first (at most {MAX_LEVELS}); every node then gives its domain at "
        f"each in domains. Without: one level, {RACK_LEVEL!r}, whose domains are the nodes' racks",
    )
    rack_uplink_gbps: OptionalLinkGbps = Field(
        0.0, description=f"each rack's uplink, Gbit/s, in a request without levels (the {RACK_LEVEL!r} level's; "
        "0: non-blocking); with levels, each level gives its own uplink_gbps",
    )
    running: list[RunningIn] = Field(default_factory=list, max_length=MAX_JOBS)
    pending: list[PendingIn] = Field(default_factory=list, max_length=MAX_JOBS)
    future_events: bool = Field(
        True, description="whether more arrivals or completions are expected (false only when replaying a finished trace); "
        "no shipped policy reads it"
    )
    durations: Literal["exact", "estimated", "unknown"] = Field(
        "estimated",
        description="what remaining_s means: 'estimated' (the default, a live cluster) a belief, 'exact' the truth "
        "(a simulator replaying a trace; every job then needs remaining_s), 'unknown' nothing is estimated "
        "(requested_s is then an error; remaining_s defaults to the flat prior minus the time run)",
    )
    history: list[FinishedIn] = Field(
        default_factory=list, max_length=MAX_HISTORY,
        description=f"the most recent finished jobs, oldest first (at most {MAX_HISTORY:,}); sent with each request so "
        "that every replica answers alike and a restart loses nothing",
    )
    restore_s: float = Field(
        DEFAULT_RESTORE_S, ge=0, le=MAX_RESTORE_S,
        description="seconds a preempted job of this cluster takes to restart from its checkpoint (the simulator's "
        "--preempt-overhead-s), the view's restore_s: preemptive policies cost a stop at GPUs x restore_s (the "
        "+preempt heuristics' domain plans for a gang, the tenants file's quota preemption); a policy that never "
        "preempts does not read it",
    )
    move_s: float = Field(
        DEFAULT_MOVE_S, ge=0, le=MAX_MOVE_S,
        description="seconds a migrated job of this cluster takes to checkpoint and restart at its new GPUs (the "
        "simulator's --migrate-overhead-s), the view's move_s: a +migrate policy moves a job only when the time "
        "the move saves is at least twice move_s; other policies do not read it",
    )


class DecisionOut(BaseModel):
    job_id: str
    action: Literal["place", "wait"]
    placement: dict[str, int] | None = Field(None, description="node name -> GPUs, when placed")
    predicted_slowdown: float | None = Field(
        None,
        description="when placed: the job's predicted run time at this placement over its run time alone "
        "(contended / isolated, at least 1; 1.0 = no slowdown, 1.25 = 25% longer): 1 / its predicted "
        "throughput ratio, with the other launches of this answer placed first and its preemptions' victims gone",
    )
    domains: dict[str, list[str]] | None = Field(
        None, description="for a placed job that gave a topology request: each fabric level -> the names of the "
        "domains its placement spans there, sorted",
    )


class MigrationOut(BaseModel):
    job_id: str
    placement: dict[str, int]


class PlacementResponse(BaseModel):
    """One decision per pending job, in request order. Preemptive policies may also preempt or
    migrate running jobs; the GPUs those free count as free for the placements."""

    decisions: list[DecisionOut]
    preempt: list[str] = Field(default_factory=list)
    migrate: list[MigrationOut] = Field(default_factory=list)
    policy: str
    policy_version: str


class PolicyOut(BaseModel):
    name: str
    version: str
    description: str
    checkpoint: str | None = None
    trained_on: dict[str, object] | None = None
    contention: str
    load_seconds: float
    queues: list[str] | None = Field(
        None, description="with a tenants file (`deepshare serve --tenants`): its queues, in file order; the policy "
        "decides behind their admission")


class HealthOut(BaseModel):
    status: Literal["ok"] = "ok"
    policy: str
