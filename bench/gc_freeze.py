"""A learned decision's time with the garbage collector's heap frozen per decision, once, or never.

Until 0.1.x every learned decision ran inside ``gc.freeze()`` / ``gc.unfreeze()``, which also
unfroze whatever a host application had frozen. This measures what that bought, in a process
shaped like a Serve replica (Ray, Serve, FastAPI and torch imported, the policy loaded), for one
``rl-hybrid`` placement request of N pending 1-GPU jobs on 4,096 8-GPU nodes, decided in-process
(:class:`PlacementEngine`, no HTTP), and for a learned policy's simulation:

- ``none``: the collector left alone (what library code does now);
- ``per-decision``: ``gc.freeze()`` before each decision, ``gc.unfreeze()`` after (the old way);
- ``startup``: ``gc.collect(); gc.freeze()`` once after start-up (what the replica does now,
  :func:`deepshare.core.heap.freeze_long_lived`).

Each mode runs in a fresh subprocess, ``--rounds`` times, the modes interleaved (each round runs
every mode once, starting one mode later than the last round), so a change of the machine's load
hits them alike; in each subprocess a decision's CPU seconds (the honest figure on a shared
machine) are the median of ``--repeat`` runs after one warm-up, and the figure printed is the
median over the rounds, with the collector's own time (``gc.callbacks``) beside it. Figures
only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

MODES = ("none", "per-decision", "startup")


class GcClock:
    """Seconds the collector ran (all generations, and the oldest alone), from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total = 0.0
        self.full = 0.0
        self.full_runs = 0
        self._start = 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        spent = time.perf_counter() - self._start
        self.total += spent
        if info.get("generation") == 2:
            self.full += spent
            self.full_runs += 1


def child(mode: str, what: str, size: int, repeat: int) -> dict:
    import ray  # noqa: F401 - a replica's heap: Ray, Serve, FastAPI, torch
    import ray.serve  # noqa: F401

    import deepshare.serving.deployment  # noqa: F401
    from deepshare.core.heap import freeze_long_lived

    if what == "service":
        from deepshare.serving.engine import EngineSettings, PlacementEngine
        from deepshare.serving.samples import scale_request
        from deepshare.serving.schemas import PlacementRequest

        engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
        request = PlacementRequest.model_validate(scale_request(4096, size))

        def run() -> object:
            return engine.place(request)
    else:
        from deepshare.core.contention import make_contention
        from deepshare.core.simulator import Simulator
        from deepshare.core.topology import uniform
        from deepshare.core.traces import generate, mix_preset
        from deepshare.policies import make_policy

        jobs = generate(size, mix=mix_preset("random"), seed=1).jobs

        def run() -> object:
            sim = Simulator(uniform(16, 8), jobs, make_contention("profiled"), keep_records=False)
            return sim.run(make_policy("rl-hybrid")).to_dict()

    if mode == "per-decision" and what == "service":  # the old engine: around the whole decision
        inner = run

        def run() -> object:  # noqa: F811
            gc.freeze()
            try:
                return inner()
            finally:
                gc.unfreeze()

    if mode == "per-decision" and what == "simulation":  # the old drive(): around each learned decision
        import deepshare.policies.learned as learned

        drive = learned.drive

        def frozen_drive(*args, **kwargs):  # type: ignore[no-untyped-def]
            gc.freeze()
            try:
                return drive(*args, **kwargs)
            finally:
                gc.unfreeze()

        learned.drive = frozen_drive
    first = run()  # warm-up: caches, lazy imports
    if mode == "startup":
        freeze_long_lived()
    clock = GcClock()
    cpu: list[float] = []
    for _ in range(repeat):
        start = time.process_time()
        answer = run()
        cpu.append(time.process_time() - start)
        assert answer == first, "the mode changed the answer"
    return {"mode": mode, "cpu_s": statistics.median(cpu), "cpu_min_s": min(cpu), "gc_s": clock.total / repeat,
            "gc_full_s": clock.full / repeat, "gc_full_runs": clock.full_runs / repeat, "objects": len(gc.get_objects()) + gc.get_freeze_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, nargs="*", default=[2000, 10000], help="service: pending jobs per request")
    parser.add_argument("--jobs", type=int, default=400, help="simulation: jobs of the rl-hybrid run (0: skip)")
    parser.add_argument("--repeat", type=int, default=3, help="decisions (or simulations) timed per subprocess")
    parser.add_argument("--rounds", type=int, default=3, help="subprocesses per mode, the modes interleaved")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "WHAT", "SIZE", "REPEAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, what, size, repeat = args.child
        print(json.dumps(child(mode, what, int(size), int(repeat))))
        return
    cases = [("service", n) for n in args.pending] + ([("simulation", args.jobs)] if args.jobs else [])
    for what, size in cases:
        label = f"one rl-hybrid decision, {size:,} pending on 4,096 nodes" if what == "service" else \
            f"an rl-hybrid simulation of {size:,} jobs on 16 x 8 GPUs"
        rounds = max(1, args.rounds)
        print(f"{label} (the modes interleaved: {rounds} round(s), each mode in a fresh subprocess per round; "
              "medians over the rounds)", flush=True)
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for round_ in range(rounds):
            for mode in MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]:
                out = subprocess.run([sys.executable, __file__, "--child", mode, what, str(size), str(args.repeat)],
                                     capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise SystemExit(f"{mode} {what} failed:\n{out.stderr[-3000:]}")
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for mode, got in runs.items():
            r = {key: statistics.median(g[key] for g in got) for key in ("cpu_s", "gc_s", "gc_full_s", "gc_full_runs", "objects")}
            print(f"  {mode:13s} {r['cpu_s']:7.3f} s CPU (min {min(g['cpu_min_s'] for g in got):.3f}); collector "
                  f"{r['gc_s']:.3f} s of which full passes {r['gc_full_s']:.3f} s ({r['gc_full_runs']:.1f}); "
                  f"{r['objects']:,.0f} tracked objects", flush=True)


if __name__ == "__main__":
    main()
