"""The ``profiled`` contention model: the measured pairwise slowdown table.

It reproduces the original artifact's use of the measured table, with its defect fixed: ratios
are recomputed whenever the set of co-located jobs changes, in both directions (a job's ratio
goes back up when its aggressor leaves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal

from deepshare.core.contention.base import RunningJob
from deepshare.core.errors import DeepShareError
from deepshare.core.topology import Topology
from deepshare.core.types import Placement
from deepshare.core.view import Prediction
from deepshare.core.workloads import Catalog


Aggregate = Literal["min", "product"]


@dataclass(frozen=True)
class ProfiledContention:
    """The measured pairwise table (victim row, aggressor column), combined over co-runners.

    Defaults are the original artifact's semantics: a multi-node job's ratio is the *minimum*
    of its pairwise ratios against every other multi-node job on any node it spans, floored at
    0.35; single-node jobs neither suffer nor cause contention. ``aggregate="product"``
    multiplies the pairwise ratios instead (independent slowdowns), and
    ``single_node_contention_free=False`` lets single-node jobs take part (looked up as their
    nearest measured 2-node profile).
    """

    floor: float = 0.35
    aggregate: Aggregate = "min"
    single_node_contention_free: bool = True
    name: str = "profiled"

    def __post_init__(self) -> None:
        if not 0.0 < self.floor <= 1.0:
            raise DeepShareError(f"contention floor must be in (0, 1], got {self.floor}")
        if self.aggregate not in ("min", "product"):
            raise DeepShareError(f"contention aggregate must be 'min' or 'product', got {self.aggregate!r}")

    def new_state(self, topology: Topology, catalog: Catalog) -> "ProfiledState":
        return ProfiledState(self, catalog)


class ProfiledState:
    """Incremental bookkeeping for :class:`ProfiledContention` (per-node sets of contenders)."""

    def __init__(self, model: ProfiledContention, catalog: Catalog) -> None:
        self._model = model
        self._catalog = catalog
        self._combine: Callable[[float, float], float] = min if model.aggregate == "min" else _mul
        self._on_node: dict[int, set[str]] = {}
        self._matrix = catalog.ratio_matrix
        self._jobs: dict[str, tuple[RunningJob, int, bool]] = {}  # job, profile-key index, contends
        self._ratio: dict[str, float] = {}
        self._raw_value: dict[str, float] = {}  # unfloored aggregate per contending job, kept by _rerate
        self._single_free = model.single_node_contention_free

    # -- protocol ----------------------------------------------------------------------------
    def add(self, job: RunningJob) -> set[str]:
        if job.job_id in self._jobs:
            raise DeepShareError(f"job {job.job_id!r} is already running")
        key, contends = self._key(job)
        self._jobs[job.job_id] = (job, key, contends)
        if not contends:
            self._ratio[job.job_id] = 1.0
            return {job.job_id}
        neighbours = self._neighbours(job.placement.nodes, exclude=job.job_id)
        for n in job.placement.nodes:
            self._on_node.setdefault(n, set()).add(job.job_id)
        return self._rerate({job.job_id, *neighbours}, force={job.job_id})

    def remove(self, job_id: str) -> set[str]:
        job, _, contends = self._jobs.pop(job_id)
        del self._ratio[job_id]
        self._raw_value.pop(job_id, None)
        if not contends:
            return set()
        for n in job.placement.nodes:
            self._on_node[n].discard(job_id)
        return self._rerate(self._neighbours(job.placement.nodes, exclude=job_id))

    def ratio(self, job_id: str) -> float:
        return self._ratio[job_id]

    def isolated(self, placement: Placement) -> bool:
        """Whether a job at ``placement`` neither suffers nor causes contention, whatever runs:
        a single node when single-node jobs are contention-free."""
        return self._single_free and len(placement.alloc) == 1

    def predict(self, job: RunningJob) -> Prediction:
        if self.isolated(job.placement):
            return Prediction(1.0)  # neither suffers nor causes contention: no lookup needed
        key, contends = self._key(job)
        if not contends:
            return Prediction(1.0)
        raw = 1.0
        others: dict[str, float] = {}
        loss = 0.0
        floor = self._model.floor
        for other_id in sorted(self._neighbours(job.placement.nodes, exclude=job.job_id)):
            _, other_key, _ = self._jobs[other_id]
            raw = self._combine(raw, self._matrix[key][other_key])
            old = self._ratio[other_id]
            new = max(floor, self._combine(self._raw_value[other_id], self._matrix[other_key][key]))
            if new != old:
                others[other_id] = new
                loss += old - new
        return Prediction(max(floor, raw), others, loss)

    # -- internals ---------------------------------------------------------------------------
    def _key(self, job: RunningJob) -> tuple[int, bool]:
        nodes = len(job.placement.alloc)
        contends = nodes > 1 or not self._single_free
        return self._catalog.placement_index(job.model, job.gpus, nodes), contends

    def _neighbours(self, nodes: Iterable[int], exclude: str) -> set[str]:
        found: set[str] = set()
        for n in nodes:
            found |= self._on_node.get(n, set())
        found.discard(exclude)
        return found

    def _raw(self, job_id: str) -> float:
        job, key, _ = self._jobs[job_id]
        row = self._matrix[key]
        jobs = self._jobs
        neighbours = self._neighbours(job.placement.nodes, exclude=job_id)
        if self._model.aggregate == "min":
            return min((row[jobs[o][1]] for o in neighbours), default=1.0)
        raw = 1.0
        for other_id in sorted(neighbours):  # a product must not depend on set order (PYTHONHASHSEED)
            raw *= row[jobs[other_id][1]]
        return raw

    def _rerate(self, ids: Iterable[str], force: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
        changed = set(force)
        floor = self._model.floor
        for job_id in ids:
            raw = self._raw(job_id)
            self._raw_value[job_id] = raw
            new = max(floor, raw)
            if self._ratio.get(job_id) != new:
                self._ratio[job_id] = new
                changed.add(job_id)
        return changed


def _mul(a: float, b: float) -> float:
    return a * b
