"""Decision time as pending jobs grow on a 4,096-node cluster (issue 14, item 1).

One placement request, 4,096 8-GPU nodes (a quarter half-busy), N pending jobs
(N = 500 .. 10,000 1-GPU jobs, plus a mixed 1/2/4/8-GPU case at the largest N), decided
in-process by :class:`PlacementEngine` (no request limits, no HTTP) for rl-hybrid and four heuristics (two of
them the fabric's: ``topo-bestfit`` and the contention-aware ``topo-aware``). Prints
seconds per decision, the exponent of a power-law fit over N, and the target (10,000 pending in
<= 2 s in-process; judged on CPU seconds, as the wall time of a shared machine is mostly other
processes' load). ``--profile N`` prints the cProfile top of one rl-hybrid decision instead.
``--fabric`` decides each request twice, side by side: on the flat cluster and on the same nodes
described as a four-level fabric (NVLink domains of 2 nodes, leaves of 16, spines of 256, cores of
1,024; :func:`fabric_request`; the nodes given NVLink, which such domains need), with every tenth
pending job requiring a leaf, and prints the ratio (issue 36's target: within 2x of the flat decision).
Each learned policy's CPU per decision is also set beside ``--baseline``'s (``srsf+packed``),
measured in the same run on the same requests, per cluster (flat, and fabric with ``--fabric``)
and N: the ratio learned / baseline (issue 37's target: at most 5x at 10,000 pending).
``--queues Q`` decides each request also behind the admission of Q tenant queues (the request's
jobs dealt into them) and prints the ratio to the decision without tenants (target: within 1.5x
at 10,000 pending); those engines are built, warmed up and timed with the others.
``--repeats K`` decides each request K times and reports the median CPU and wall seconds (the
mixed case too, in the same rounds; a policy stopped by ``--max-seconds`` has no mixed case).
Every policy is loaded and warmed up before anything is timed, and the heap is then frozen
(:func:`deepshare.core.heap.freeze_long_lived`, what a placement replica does after start-up), so
each policy is timed in the same process state whatever the order of ``--policies``: before, a
heuristic timed after a learned policy walked torch's objects in every full collection and took
about 1.3x its CPU, which made the learned / baseline ratio depend on the order.
Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import math
import os
import pstats
import statistics
import time
from typing import Iterable

from record import Record, add_json_flag

from deepshare.core.heap import freeze_long_lived
from deepshare.policies.registry import policy_info
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import scale_request
from deepshare.serving.schemas import PlacementRequest

POLICIES = ("rl-hybrid", "srsf+packed", "las+consolidated", "las+topo-bestfit", "las+topo-aware")
TARGET_S = 2.0
LEARNED_OVER_BASELINE = 5.0
"""Issue 37: a learned decision costs at most this many times the baseline's CPU (10,000 pending)."""


def time_one(engine: PlacementEngine, request: PlacementRequest, repeats: int = 1) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of this process (the honest figure on a shared machine), launches;
    with ``repeats`` > 1, the medians of that many decisions of the same request."""
    walls, cpus, placed = [], [], 0
    for _ in range(max(1, repeats)):
        gc.collect()  # the previous decision's garbage is not this one's to collect
        start, cpu = time.perf_counter(), time.process_time()
        response = engine.place(request)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        placed = sum(d.action == "place" for d in response.decisions)
    return statistics.median(walls), statistics.median(cpus), placed


def is_learned(policy: str) -> bool:
    """Whether the registry lists ``policy`` as not a heuristic (the learned policies)."""
    try:
        return not policy_info(policy).heuristic
    except Exception:  # an unknown name fails later, where the engine is built
        return False


def exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) on log(N)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(s, 1e-9)) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


FABRIC_LEVELS = (("nvlink", 2, True), ("leaf", 16, False), ("spine", 256, False), ("core", 1024, False))
"""(name, nodes per domain, NVLink) of the ``--fabric`` request's levels, lowest first."""
NVLINK_GBPS = 3600.0
"""The ``--fabric`` request's nodes' NVLink, per direction (an H100's, as the fabric presets')."""


def fabric_request(request: dict, required_every: int = 10) -> dict:
    """``request`` with its nodes described as :data:`FABRIC_LEVELS` (leaves 2:1 oversubscribed)
    and every ``required_every``-th pending job requiring one leaf. The nodes get NVLink
    (:data:`NVLINK_GBPS`): a domain of several nodes at an NVLink level refuses nodes without it."""
    out = dict(request)
    out["levels"] = [{"name": name, "nvlink": nvlink, **({"oversubscription": 2.0} if name == "leaf" else {})}
                     for name, _, nvlink in FABRIC_LEVELS]
    out["nodes"] = [{**node, "fabric": "nvlink", "nvlink_gbps": NVLINK_GBPS,
                     "domains": {name: f"{name}{i // size}" for name, size, _ in FABRIC_LEVELS}}
                    for i, node in enumerate(request["nodes"])]
    out["pending"] = [{**job, "required_level": "leaf"} if i % required_every == 0 else job
                      for i, job in enumerate(request["pending"])]
    return out


def queued_request(request: dict, queues: int) -> dict:
    """``request`` with its pending and running jobs dealt round-robin into ``queues`` queues."""
    out = dict(request)
    for key in ("pending", "running"):
        out[key] = [{**job, "queue": f"q{i % queues}"} for i, job in enumerate(request.get(key, []))]
    return out


def many_queues(queues: int, total_gpus: int):  # type: ignore[no-untyped-def]
    """A tenants file of ``queues`` queues in one cohort, each with an equal share of the GPUs as
    its nominal quota and the rest of the cluster as its borrowing limit."""
    from deepshare.tenants import parse_tenants

    nominal = total_gpus // queues
    lines = ["queues:"] + [f"  - {{name: q{i}, cohort: all, nominal_gpus: {nominal}, "
                           f"borrowing_limit_gpus: {total_gpus - nominal}, weight: 1}}" for i in range(queues)]
    return parse_tenants("\n".join(lines) + "\n", f"{queues} generated queues")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--pending", type=int, nargs="+", default=[500, 1000, 2000, 5000, 10000])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--max-seconds", type=float, default=120.0, help="skip larger N once one decision takes longer")
    parser.add_argument("--profile", type=int, default=0, help="profile one rl-hybrid decision with this many pending")
    parser.add_argument("--fabric", action="store_true",
                        help="also decide each request on the same nodes as a four-level fabric, side by side")
    parser.add_argument("--queues", type=int, default=0,
                        help="also decide each request behind the admission of this many tenant queues, side by side")
    parser.add_argument("--baseline", default="srsf+packed",
                        help="the policy whose CPU each learned policy's is set beside (when both are in --policies)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="decide each request this many times and report the medians (a shared machine is noisy)")
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("decide_scale" + (f" ({args.queues} queues)" if args.queues else ""), args.json)  # a section apart
    if args.profile:
        engine = PlacementEngine(EngineSettings(policy=args.policies[0]))
        request = PlacementRequest.model_validate(scale_request(args.nodes, args.profile))
        profiler = cProfile.Profile()
        profiler.runcall(engine.place, request)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return
    repeats = max(1, args.repeats)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.nodes} x 8-GPU nodes; target: 10,000 pending 1-GPU jobs in <= {TARGET_S:.0f} s in-process"
          + (f"; medians of {repeats} decisions each" if repeats > 1 else ""))
    cpus: dict[tuple[str, str, int], float] = {}  # (policy, cluster, N) -> CPU seconds, for the side by side
    engines, queued = loaded(args.policies, args.nodes, args.queues)
    timed = interleaved(engines, args.nodes, args.pending, args.fabric, repeats, args.max_seconds, queued, args.queues,
                        mixed=True)
    for policy in args.policies:
        points: list[tuple[int, float]] = []  # (N, CPU seconds): wall time on a shared machine is noise
        for n in args.pending:
            if (policy, "flat", n) not in timed:
                print(f"  {policy:18s} stopped before {n} pending: a smaller request took over {args.max_seconds:.0f} s")
                break
            seconds, cpu, placed = timed[(policy, "flat", n)]
            points.append((n, cpu))
            cpus[(policy, "flat", n)] = cpu
            if args.fabric:
                f_seconds, f_cpu, f_placed = timed[(policy, "fabric", n)]
                cpus[(policy, "fabric", n)] = f_cpu
                record.add(f"{policy}: one decision, {n:,} pending on {args.nodes:,} nodes in four fabric levels, "
                           "over the flat cluster's", f_cpu / max(cpu, 1e-9), "x", at_most=2.0 if n == 10000 else None)
                print(f"  {policy:18s} pending {n:6d} (fabric): {f_seconds:7.2f} s ({f_cpu:6.2f} s CPU), {f_placed} placed;"
                      f" {f_cpu / max(cpu, 1e-9):.2f}x the flat decision's CPU", flush=True)
            if args.queues:
                q_seconds, q_cpu, q_placed = timed[(policy, "queued", n)]
                record.add(f"{policy}: one decision, {n:,} pending in {args.queues} queues on {args.nodes:,} nodes, "
                           "over the decision without tenants", q_cpu / max(cpu, 1e-9), "x",
                           at_most=1.5 if n == 10000 else None)
                print(f"  {policy:18s} pending {n:6d} ({args.queues} queues): {q_seconds:7.2f} s ({q_cpu:6.2f} s CPU), "
                      f"{q_placed} placed; {q_cpu / max(cpu, 1e-9):.2f}x the decision without tenants", flush=True)
            record.add(f"{policy}: one decision, {n:,} pending 1-GPU jobs on {args.nodes:,} x 8-GPU nodes", cpu, "s CPU",
                       at_most=TARGET_S if n == 10000 else None)
            print(f"  {policy:18s} pending {n:6d} (1-GPU):   {seconds:7.2f} s ({cpu:6.2f} s CPU), {placed} placed", flush=True)
        mixed = args.pending[-1]
        if (policy, "mixed", mixed) in timed:  # not for a policy stopped by --max-seconds
            seconds, cpu, placed = timed[(policy, "mixed", mixed)]
            print(f"  {policy:18s} pending {mixed:6d} (1/2/4/8): {seconds:7.2f} s ({cpu:6.2f} s CPU), {placed} placed")
        if len(points) >= 2:
            last_n, last_cpu = points[-1]
            if last_n >= 10000:
                verdict = "meets the target" if last_cpu <= TARGET_S else "misses the target"
            elif max(args.pending) >= 10000:  # stopped: a smaller request took longer than --max-seconds
                verdict = "misses the target"
            else:
                verdict = "the target is not measured"
            print(f"  {policy:18s} fitted exponent (CPU s over N) {exponent(points):.2f}; {verdict} "
                  f"({last_n} pending: {last_cpu:.2f} s CPU vs <= {TARGET_S:.0f} s at 10,000)", flush=True)
    side_by_side(record, cpus, args.policies, args.baseline, args.nodes)
    record.write()


def interleaved(engines: dict[str, PlacementEngine], nodes: int, pending: list[int], fabric: bool, repeats: int,
                max_seconds: float, queued: dict[str, PlacementEngine] | None = None,
                queues: int = 0, mixed: bool = False) -> dict[tuple[str, str, int], tuple[float, float, int]]:
    """(policy, cluster, N) -> the medians of :func:`time_one` (wall, CPU, launches), the policies'
    decisions of one request taken in turn, each round starting one policy later, so that no
    policy is always timed right after the same one and carries its aftermath alone; each round
    decides every cluster's request (flat, fabric, queued) before the next round begins. A
    policy whose decision took longer than ``max_seconds`` (wall) is not timed at larger N.
    ``queued`` (policy -> its engine behind ``queues`` tenant queues, from :func:`loaded`): the
    same request dealt into the queues is decided by those too, as cluster ``queued``. ``mixed``:
    at the largest N, a request of 1/2/4/8-GPU jobs on the flat cluster is decided too, as cluster
    ``mixed``, in the same rounds, by the policies still timed there."""
    samples: dict[tuple[str, str, int], list[tuple[float, float, int]]] = {}
    live = list(engines)
    for n in pending:
        clusters = [("flat", scale_request(nodes, n))] + ([("fabric", fabric_request(scale_request(nodes, n)))] if fabric else [])
        if queued:
            clusters.append(("queued", queued_request(scale_request(nodes, n), queues)))
        if mixed and n == pending[-1]:
            clusters.append(("mixed", scale_request(nodes, n, (1, 2, 4, 8))))
        requests = [(cluster, PlacementRequest.model_validate(body)) for cluster, body in clusters]
        for round_ in range(repeats):  # round by round, so a change of the machine's load hits every cluster alike
            turn = live[round_ % len(live):] + live[:round_ % len(live)] if live else []
            for cluster, request in requests:
                deciders = queued if cluster == "queued" else engines
                for policy in turn:
                    samples.setdefault((policy, cluster, n), []).append(time_one(deciders[policy], request))
        live = [policy for policy in live if statistics.median(w for w, _, _ in samples[(policy, "flat", n)]) <= max_seconds]
    return {key: (statistics.median(w for w, _, _ in got), statistics.median(c for _, c, _ in got), got[-1][2])
            for key, got in samples.items()}


def loaded(policies: list[str], nodes: int,
           queues: int = 0) -> tuple[dict[str, PlacementEngine], dict[str, PlacementEngine]]:
    """An engine per policy, and with ``queues`` one more per policy behind that many tenant
    queues (:func:`many_queues`), each warmed up on a small request, then the heap frozen: every
    policy is timed in one process state (torch loaded if any policy needs it, start-up objects out
    of the collector's walks, as in a placement replica), whichever is timed first."""
    engines = {policy: PlacementEngine(EngineSettings(policy=policy)) for policy in policies}
    queued = {policy: PlacementEngine(EngineSettings(policy=policy, tenants=many_queues(queues, 8 * nodes)))
              for policy in policies} if queues else {}
    settle(engines.values(), nodes, queued.values(), queues)
    return engines, queued


def settle(engines: Iterable[PlacementEngine], nodes: int, queued: Iterable[PlacementEngine] = (),
           queues: int = 0) -> None:
    """Warm each engine up on a small request (``queued``'s on it dealt into ``queues`` queues),
    then freeze the heap: the one process state every timing of a side by side is taken in."""
    warm_up = PlacementRequest.model_validate(scale_request(nodes, 100))
    for engine in engines:
        engine.place(warm_up)
    queued = list(queued)
    if queued:
        warm_queued = PlacementRequest.model_validate(queued_request(scale_request(nodes, 100), queues))
        for engine in queued:
            engine.place(warm_queued)
    freeze_long_lived()


def side_by_side(record: Record, cpus: dict[tuple[str, str, int], float], policies: list[str], baseline: str,
                 nodes: int) -> None:
    """Each learned policy's CPU per decision over ``baseline``'s, per cluster and N (same run)."""
    learned = [p for p in policies if p != baseline and is_learned(p)]
    if not learned:
        return
    if baseline not in policies:
        print(f"no learned / {baseline} ratios: add {baseline} to --policies")
        return
    print(f"learned over {baseline}, CPU of one decision on {nodes:,} nodes, this run "
          f"(target at 10,000 pending: <= {LEARNED_OVER_BASELINE:g}x)")
    for cluster in ("flat", "fabric"):
        for (policy, kind, n), cpu in cpus.items():
            base = cpus.get((baseline, cluster, n))
            if kind != cluster or policy not in learned or base is None:
                continue
            ratio = cpu / max(base, 1e-9)
            verdict = ("meets" if ratio <= LEARNED_OVER_BASELINE else "misses") if n == 10000 else "no target"
            print(f"  {cluster:6s} pending {n:6d}: {policy:18s} {cpu:6.2f} s CPU, {baseline} {base:6.2f} s CPU: "
                  f"{ratio:5.2f}x ({verdict})", flush=True)
            record.add(f"{policy}: one decision, {n:,} pending on {nodes:,} nodes ({cluster}), over {baseline}'s CPU",
                       ratio, "x", at_most=LEARNED_OVER_BASELINE if n == 10000 else None)


if __name__ == "__main__":
    main()
