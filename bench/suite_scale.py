"""Suite wall time on a fake multi-node Ray cluster beside the local pool (issue 32).

One suite, in one run, side by side:
  * the local pool: ``run_suite(spec, workers=W)`` (``--local-workers``, default this machine's cores),
    and one local process (``workers=1``), what one node is to be compared with;
  * Ray tasks on a ``ray.cluster_utils.Cluster`` (a head with no CPUs, like ``deepshare cluster
    fake``) with 1, 2 and 3 one-CPU worker nodes (``--nodes``): ``run_suite(spec, on_ray=True)``,
    what ``deepshare evaluate --suite NAME --address HOST:PORT`` runs.
Prints each configuration's wall time, runs per second and ratio to the local pool, and whether
its JSON is the local run's (it must be). Each Ray configuration is timed after a warm-up that
starts a worker on every node and imports the suite's code and torch there: on a real cluster a
suite runs for hours, and a worker's first import is not what scales. The local side is warmed up
too, once before the first round: each local configuration runs the suite's first cell untimed
(this process imports torch and builds every policy, and its pool's workers, forked from it,
start with them). Each ``run_suite`` still starts its own pool, as every ``evaluate --suite``
does: that start-up (a fresh pool of the same size running one empty task per process, median of
3) is measured apart and printed; it is inside the local pool's figures. ``--repeats`` rounds,
each timing every configuration in turn (so a change in the machine's load hits them alike); the
best of each is printed.

Caveat: the fake nodes share this machine's cores (and whatever else runs on it), so beyond the
core count more nodes cannot be faster; on a real cluster each node brings its own.

The default suite is the ``quick`` grid with one trace seed (12 cells), three heuristics and
rl-base: 48 runs, a learned run 10-20x a heuristic one, about half a minute in one process.

Usage: python bench/suite_scale.py [--suite NAME|PATH] [--nodes 1,2,3] [--local-workers N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import Any, Callable

from deepshare.experiments.suite import SuiteSpec, cells, load_suite, run_suite
from deepshare.infra import raycompat

NODE = dict(num_cpus=1, object_store_memory=100 * 1024**2)


def default_suite() -> SuiteSpec:
    return load_suite("quick").model_copy(update={
        "name": "quick-1-seed", "seeds": 1, "heuristics": ("srsf+packed", "las+consolidated", "srsf+uncontended+preempt"),
        "learned": ("rl-base",),
    })


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of ``run()`` and its result."""
    began = time.perf_counter()
    result = run()
    return time.perf_counter() - began, result


def nothing() -> None:
    """An empty task: what a fresh pool's start-up is timed with."""


def pool_start_up(workers: int) -> float:
    """Wall seconds (median of 3) of starting a pool of ``workers`` processes as the suite's local
    runs do (``run_suite``'s pool, a fresh one per run) and running one empty task on each."""
    import statistics
    from concurrent.futures import ProcessPoolExecutor, wait

    from deepshare.experiments.suite_runs import _single_threaded

    def start() -> None:
        with ProcessPoolExecutor(max_workers=workers, initializer=_single_threaded) as pool:
            wait([pool.submit(nothing) for _ in range(workers)])

    return statistics.median(timed(start)[0] for _ in range(3))


def warm_up(nodes: int) -> None:
    """A worker on each node, with the suite's code and torch imported."""
    import ray

    @ray.remote(num_cpus=1)
    def warm() -> str:
        import torch  # noqa: F401 - the learned policies' import, paid once per worker

        import deepshare.experiments.suite  # noqa: F401

        time.sleep(1.0)  # hold the CPU so the next warm-up task goes to another node
        return ray.get_runtime_context().get_node_id()

    ray.get([warm.options(scheduling_strategy="SPREAD").remote() for _ in range(nodes)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", metavar="NAME|PATH", help="a bundled suite or a suite YAML (default: see above)")
    parser.add_argument("--nodes", default="1,2,3", help="one-CPU worker node counts to time (default 1,2,3)")
    parser.add_argument("--local-workers", type=int, default=os.cpu_count() or 1, help="the local pool's processes")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; the best of each configuration counts (default 2)")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.nodes.split(",")})
    spec = load_suite(args.suite) if args.suite else default_suite()
    runs = len(cells(spec)) * (len(spec.heuristics) + len(spec.learned))
    print(f"suite {spec.name}: {len(cells(spec))} cells, {runs} runs; this machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    local_name = f"local pool, {args.local_workers} process(es)"
    local_runs = {local_name: args.local_workers, "local, 1 process": 1} if args.local_workers > 1 else {local_name: 1}

    best: dict[str, float] = {}
    same: dict[str, bool] = {}
    reference: list[dict[str, Any]] = []  # the first local run's JSON

    def keep(name: str, wall: float, doc: dict[str, Any]) -> None:
        reference[:] = reference or [doc]
        best[name] = min(best.get(name, float("inf")), wall)
        same[name] = same.get(name, True) and doc == reference[0]
        print(f"  {name}: {wall:.1f} s", flush=True)

    for workers in local_runs.values():  # the local side's warm-up, as the Ray nodes get theirs: untimed
        run_suite(spec, workers=workers, only_cells=cells(spec)[:1])
    if args.local_workers > 1:
        print(f"a fresh local pool of {args.local_workers} processes starts in {pool_start_up(args.local_workers):.2f} s "
              "(inside each local pool figure: every run_suite starts its own)", flush=True)
    tmp = tempfile.mkdtemp(prefix="ds-bench-")
    os.environ["RAY_TMPDIR"] = tmp
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        for round_ in range(1, args.repeats + 1):  # rounds interleave the configurations: load hits all alike
            print(f"round {round_} of {args.repeats}", flush=True)
            for name, workers in local_runs.items():
                wall, result = timed(lambda: run_suite(spec, workers=workers))
                keep(name, wall, result.to_json())
            nodes: list[Any] = []
            for count in counts:
                while len(nodes) < count:
                    nodes.append(cluster.add_node(wait=False, **NODE))
                    raycompat.wait_for_node(cluster, nodes[-1], 120)  # add_node(wait=True) gives a busy machine 30 s
                cluster.wait_for_nodes()
                warm_up(count)
                wall, result = timed(lambda: run_suite(spec, on_ray=True))
                keep(f"Ray, {count} one-CPU node(s)", wall, result.to_json())
            for node in nodes:  # the next round starts from fresh nodes again
                cluster.remove_node(node)
    finally:
        ray.shutdown()
        cluster.shutdown()  # only the processes this cluster started
        shutil.rmtree(tmp, ignore_errors=True)

    local_s = best[local_name]
    print(f"\nbest of {args.repeats} round(s); wall time / the local pool's (below 1: faster)")
    print(f"{'configuration':<32} {'wall (s)':>9} {'runs/s':>7} {'/ local pool':>13} {'JSON = local':>13}")
    for name, wall in best.items():
        print(f"{name:<32} {wall:>9.1f} {runs / wall:>7.2f} {wall / local_s:>13.2f} {'yes' if same[name] else 'NO':>13}")
    one = best.get(f"Ray, {counts[0]} one-CPU node(s)")
    if one is not None and len(counts) > 1:
        print(f"speed-up over {counts[0]} node(s): " + ", ".join(
            f"{count} nodes {one / best[f'Ray, {count} one-CPU node(s)']:.2f}x" for count in counts[1:]))


if __name__ == "__main__":
    main()
