"""Start-up: ``deepshare simulate`` of the artifact's 256-job trace as a whole process.

Measures, in one run and interleaved (so machine load hits all alike), the best of N:
  * ``python -c pass``                      the interpreter's own floor;
  * ``python -c "import deepshare.cli"``    the CLI's imports alone;
  * ``python -m deepshare simulate --trace deepshare/data/traces/deepshare-simulate-trace0.json
    --policy las+consolidated``             the whole command (parse, imports, load, simulate, print);
and prints wall time and CPU time (user + system of the child, from ``resource``) for each, and
the command's ratio to the floor. On a shared, loaded machine the CPU time is the steadier
number; the wall time is what a user waits.

Target (issue 14): the whole ``simulate`` process in <= 0.4 s wall (the original: 6.8 s).

Usage: python bench/startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from record import Record, add_json_flag

TARGET_S = 0.4
ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import deepshare.cli": [sys.executable, "-c", "import deepshare.cli"],
    "deepshare simulate (256 jobs)": [
        sys.executable, "-m", "deepshare", "simulate", "--trace", str(TRACE), "--policy", "las+consolidated",
    ],
}


def once(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``cmd``; its output is discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (best is kept; default 10)")
    add_json_flag(parser)
    args = parser.parse_args()
    record = Record("startup", args.json)
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: expected a positive integer")
    best = {name: (float("inf"), float("inf")) for name in COMMANDS}
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():  # interleaved: load changes hit every command alike
            wall, cpu = once(cmd)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    floor_wall, floor_cpu = best["python -c pass"]
    print(f"start-up, best of {args.runs} (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for name, (wall, cpu) in best.items():
        print(f"  {name:32s} wall {wall:6.3f} s  CPU {cpu:6.3f} s  "
              f"(x{wall / floor_wall:5.1f} / x{cpu / max(floor_cpu, 1e-3):5.1f} python -c pass)")
    wall, cpu = best["deepshare simulate (256 jobs)"]
    print(f"  -> deepshare simulate whole process: {wall:.3f} s wall, {cpu:.3f} s CPU "
          f"(target <= {TARGET_S} s wall; original simulator 6.8 s)")
    record.add(f"deepshare simulate of the bundled 256-job trace, whole process, best of {args.runs}", wall, "s wall", at_most=TARGET_S)
    record.add("the same, CPU", cpu, "s CPU")
    record.add("python -c pass, for reference", floor_wall, "s wall")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("  (PYTHONDONTWRITEBYTECODE is set here: no .pyc is written, so unless an earlier run left them every "
              "run compiles the package's modules again; unset it for the figure an installed package gives)")
    record.write()


if __name__ == "__main__":
    main()
