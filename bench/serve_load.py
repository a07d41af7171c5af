"""Load on the placement service over loopback, side by side with the same policy in-process.

Starts `deepshare serve` on a free loopback port (or targets --url) and, for a small request
(4 nodes, 3 pending jobs) and a large one (64 nodes, 64 pending), measures:

* the in-process floor: parse the JSON body, decide, serialise the answer, no HTTP;
* 500 sequential requests over one keep-alive connection (p50, p99);
* 8 and 32 concurrent clients (threads with their own connections), at least 2,000 requests
  each (throughput in requests and decisions per second, p50, p99, errors);

then prints the HTTP overhead as a ratio over the in-process floor and the scorer batch sizes
the service saw (from /metrics). Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

import requests

from deepshare.serving.client import PlacementClient
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import large_request, small_request
from deepshare.serving.schemas import PlacementRequest


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def floor(policy: str, body: str, n: int) -> list[float]:
    engine = PlacementEngine(EngineSettings(policy=policy))
    times = []
    for _ in range(n):
        start = time.perf_counter()
        engine.place(PlacementRequest.model_validate_json(body)).model_dump_json(exclude_none=True)
        times.append(time.perf_counter() - start)
    return times


def session(token: str | None) -> requests.Session:
    s = requests.Session()
    s.headers["Content-Type"] = "application/json"
    if token:
        s.headers["Authorization"] = f"Bearer {token}"
    return s


def sequential(url: str, body: str, n: int, token: str | None) -> list[float]:
    s, times = session(token), []
    for _ in range(n):
        start = time.perf_counter()
        reply = s.post(url + "/v1/placements", data=body, timeout=30)
        times.append(time.perf_counter() - start)
        reply.raise_for_status()
    return times


def concurrent(url: str, body: str, clients: int, total: int, token: str | None) -> tuple[float, list[float], int]:
    per_client = -(-total // clients)

    def worker(_: int) -> tuple[list[float], int]:
        s, times, errors = session(token), [], 0
        for _ in range(per_client):
            start = time.perf_counter()
            try:
                ok = s.post(url + "/v1/placements", data=body, timeout=60).status_code == 200
            except requests.RequestException:
                ok = False
            times.append(time.perf_counter() - start)
            errors += not ok
        return times, errors

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(worker, range(clients)))
    wall = time.perf_counter() - start
    return wall, [t for times, _ in results for t in times], sum(e for _, e in results)


def batch_sizes(url: str, token: str | None) -> tuple[float, float]:
    text = session(token).get(url + "/metrics", timeout=10).text
    found = {m.group(1): float(m.group(2)) for m in re.finditer(r"deepshare_serve_scorer_batch_size_(sum|count) (\S+)", text)}
    return found.get("sum", 0.0), found.get("count", 0.0)


@contextmanager
def started_service(policy: str, token: str | None) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="ray-"))
    if token:
        env["DEEPSHARE_SERVE_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepshare", "serve", "--policy", policy, "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        PlacementClient(url).wait_ready(alive=lambda: proc.poll() is None)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def run(url: str, args: argparse.Namespace) -> None:
    cases = {"small (4 nodes, 3 pending)": small_request(), "large (64 nodes, 64 pending)": large_request()}
    cases = {name: request for name, request in cases.items() if name.split()[0] in args.cases}
    print(f"policy {args.policy}; {os.cpu_count()} CPUs; service at {url}\n")
    print(f"{'case':30s} {'mode':22s} {'req/s':>8s} {'decisions/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>6s}")
    for name, request in cases.items():
        body = json.dumps(request)
        pending = len(request["pending"])
        base = floor(args.policy, body, args.sequential)
        print(f"{name:30s} {'in-process (floor)':22s} {'':>8s} {'':>12s} {ms(pct(base, .5)):>8s} {ms(pct(base, .99)):>8s}")
        seq = sequential(url, body, args.sequential, args.token)
        print(f"{name:30s} {'sequential x%d' % args.sequential:22s} {len(seq) / sum(seq):8.0f} {pending * len(seq) / sum(seq):12.0f} "
              f"{ms(pct(seq, .5)):>8s} {ms(pct(seq, .99)):>8s} {0:6d}")
        print(f"{'':30s} {'overhead over floor':22s} {'':>8s} {'':>12s} {pct(seq, .5) / pct(base, .5):7.1f}x "
              f"{pct(seq, .99) / pct(base, .99):7.1f}x")
        for clients in args.clients:
            before = batch_sizes(url, args.token)
            wall, times, errors = concurrent(url, body, clients, args.requests, args.token)
            after = batch_sizes(url, args.token)
            passes = after[1] - before[1]
            mean_batch = (after[0] - before[0]) / passes if passes else float("nan")
            print(f"{'':30s} {'%d clients x %d' % (clients, len(times)):22s} {len(times) / wall:8.0f} "
                  f"{pending * len(times) / wall:12.0f} {ms(pct(times, .5)):>8s} {ms(pct(times, .99)):>8s} {errors:6d}"
                  f"   mean scorer batch {mean_batch:.2f}")
    print("\nmedian of the floor and the HTTP path are measured in this one run, side by side")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an already running service (default: start one on a free loopback port)")
    parser.add_argument("--policy", default="rl-hybrid", help="policy to serve and to call in-process (default rl-hybrid)")
    parser.add_argument("--token", help="bearer token of the service at --url")
    parser.add_argument("--sequential", type=int, default=500, help="sequential requests (default 500)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level (default 2000)")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=["small", "large"], help="default small,large")
    parser.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32], help="default 8,32")
    args = parser.parse_args()
    if args.url:
        run(args.url.rstrip("/"), args)
        return
    args.token = args.token or "bench-token-0123"
    with started_service(args.policy, args.token) as url:
        run(url, args)


if __name__ == "__main__":
    main()
