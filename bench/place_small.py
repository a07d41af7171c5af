"""CPU time of one small placement request, decided in-process (issue 14, item 2).

``PlacementEngine(EngineSettings()).place(...)`` on :func:`deepshare.serving.samples.small_request`,
repeated (after a warm-up), no HTTP: the decision's own cost, four encode() calls per request
with the default rl-hybrid policy. Prints CPU ms per call (wall time on a shared machine is
mostly other processes' load). Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import time

from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import small_request
from deepshare.serving.schemas import PlacementRequest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    engine = PlacementEngine(EngineSettings())
    request = PlacementRequest.model_validate(small_request())
    for _ in range(args.warmup):
        engine.place(request)
    cpu = time.process_time()
    for _ in range(args.calls):
        engine.place(request)
    per_call = (time.process_time() - cpu) / args.calls
    print(f"small request, in-process: {1000 * per_call:.3f} CPU ms per call over {args.calls} calls")


if __name__ == "__main__":
    main()
