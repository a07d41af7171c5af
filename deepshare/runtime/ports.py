"""What the control loop needs from the cluster, as a protocol: :class:`Launcher`.

The loop's logic (reaping, back-off, cancels, recovery, applying a policy's decision) does not
depend on Ray, only on these six operations, so it takes a ``Launcher`` in its constructor:
:class:`~deepshare.runtime.launcher.RayLauncher` on a real (or fake local) Ray cluster, an
in-memory fake in the tests (``tests/runtime/fake_launcher.py``), which then run in seconds without Ray.

A run is identified by ``(job_id, attempt)``; ``world`` is its number of ranks (the job's GPUs),
which the Ray implementation needs to find its workers by name.

The launcher names the nodes (:meth:`Launcher.cluster`), and a node keeps its name while the
scheduler lives; after a restart :meth:`Launcher.remember` gives it back the name an earlier
scheduler journalled a run under, so the run's placement still finds its nodes.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from deepshare.runtime.cluster import ClusterState
from deepshare.runtime.launcher import LaunchSettings, RunStatus
from deepshare.runtime.spec import LiveJobSpec


@runtime_checkable
class Launcher(Protocol):
    """Start, watch, stop and find runs of jobs on a cluster, and say which GPU nodes are up."""

    def cluster(self) -> ClusterState:
        """The GPU nodes alive now (their names, GPUs and topology). Free GPUs are the loop's to
        derive: it subtracts the journal's running placements from each node's capacity."""
        ...

    def launch(self, job_id: str, attempt: int, spec: LiveJobSpec, alloc: Sequence[tuple[str, int]],
               cluster: ClusterState, settings: LaunchSettings, working_dir: str | None) -> None:
        """Create run ``attempt`` of the job, ``alloc`` = ``((node name, gpus), ...)``; on any
        failure remove what was created and raise :class:`~deepshare.runtime.launcher.LaunchError`.
        Called from several threads at once (one per launch of a tick)."""
        ...

    def poll(self, job_id: str, attempt: int, world: int) -> RunStatus:
        """What the run is doing now (running, finished, stopped, failed, lost, unknown), with
        rank 0's latest report."""
        ...

    def request_stop(self, job_id: str, attempt: int, world: int) -> None:
        """Ask the run to checkpoint and exit (fire and forget; :meth:`poll` shows it go)."""
        ...

    def exists(self, job_id: str, attempt: int, world: int) -> bool:
        """Whether the run is still complete on the cluster (for re-attaching after a restart)."""
        ...

    def teardown(self, job_id: str, attempt: int, world: int) -> None:
        """Remove whatever is left of the run, freeing its GPUs; idempotent."""
        ...

    def remember(self, job_id: str, attempt: int, alloc: Sequence[tuple[str, int]]) -> None:
        """The run, started by an earlier scheduler on ``alloc`` (``((node name, gpus), ...)`` as
        journalled) and re-attached now: its nodes keep those names in later :meth:`cluster` reads.
        Why: names are chosen afresh after a restart, and a node whose namesake joined later was
        first named plainly, then read back suffixed: its runs looked lost and were torn down."""
        ...
