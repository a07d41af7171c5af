"""Load on the placement service over loopback, side by side with the same policy in-process
and with a trivial Ray Serve app behind the same proxy.

Starts one private Ray instance on a free loopback port (or targets --url) serving three
applications: the placement service (the same ``service_app`` as ``deepshare serve``) at ``/``,
the Serve floor at ``/floor``: a deployment that reads the body and answers a fixed small
JSON, so it costs what Ray Serve itself costs (proxy, routing, the hop to a replica), and the
FastAPI floor at ``/fastapi-floor``: the same answer from a one-route FastAPI app behind
``@serve.ingress`` as the service's own app is (what choosing FastAPI costs, before any of the
service's work; the targets refer to the Serve floor), and with ``--routed`` the same service
without its routing bypass at ``/routed`` (placement requests through FastAPI's route instead of
:class:`~deepshare.serving.api.AnswerPlacements`: what the bypass saves). For a small
request (4 nodes, 3 pending jobs) and a large one (64 nodes, 64 pending) it measures:

* the in-process floor: parse the JSON body, decide, serialise the answer, no HTTP; back to back,
  and each call after a 5 ms sleep (:data:`IDLE_S`: sequential requests reach a replica after
  idle gaps, and on a machine whose cores slow down when idle the decision costs more there);
* sequential requests over one keep-alive connection (p50, p99), to the service and to the
  floors in alternating rounds, so all see the same background load;
* 8 and 32 concurrent clients (threads with their own connections), at least 2,000 requests
  each (throughput in requests and decisions per second, p50, p99, errors), the 8-client level
  against the floors too, in alternating rounds;

then prints the service over the Serve floor (p50 and p99 sequential, 8-client throughput) next
to issue 14's targets, the HTTP overhead over the in-process floor, the scorer batch sizes the
service saw and the time its requests spent in the replica (both from the service's metrics, read
from the private Ray instance's metrics agent, where the replicas record them; replicas report
every 10 s, Ray's default, and each reading waits until the figures stop moving; the in-replica time is
a histogram mean, which Ray rebuilds from bucket midpoints, so it is approximate) and the load average.
Figures only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

import requests
from process_cpu import cpu_seconds, per_request_ms
from record import Record, add_json_flag
from starlette.requests import Request  # at module level: FastAPI resolves the floor route's annotations here
from starlette.responses import Response

from deepshare.serving.client import PlacementClient
from deepshare.serving.deployment import APP_NAME
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import large_request, small_request
from deepshare.serving.schemas import PlacementRequest

PATH = "/v1/placements"
FLOOR_PREFIX = "/floor"
FLOOR_APP = "floor"
FASTAPI_FLOOR_PREFIX = "/fastapi-floor"
FASTAPI_FLOOR_APP = "fastapi-floor"
ROUTED_PREFIX = "/routed"
ROUTED_APP = "deepshare-routed"
SERVE_FLOOR, FASTAPI_FLOOR, ROUTED = "Serve floor", "FastAPI floor", "service, routed"
FLOOR_BODY = b'{"decisions":[],"policy":"floor","policy_version":"0"}'
"""What the Serve floor answers every request (a small fixed JSON)."""
TARGET_P50 = TARGET_P99 = 1.1
TARGET_THROUGHPUT = 0.9
"""Issue 14's targets: sequential p50/p99 at most 1.1x the Serve floor's, 8-client req/s at least 0.9x."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


IDLE_S = 0.005
"""The pause before each call of the in-process floor's second row: on a machine whose cores
slow down when idle (this 2-core VM: a CPU-bound millisecond takes about two after a 5 ms sleep),
that row is what a decision costs at the speed a replica between sequential requests runs."""


def floor(policy: str, body: str, n: int, idle_s: float = 0.0) -> list[float]:
    engine = PlacementEngine(EngineSettings(policy=policy))
    times = []
    for _ in range(n):
        if idle_s:
            time.sleep(idle_s)
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
        reply = s.post(url + PATH, data=body, timeout=30)
        times.append(time.perf_counter() - start)
        reply.raise_for_status()
    return times


def side_by_side(urls: list[str], body: str, n: int, token: str | None, rounds: int = 5,
                 warmed: Callable[[], object] | None = None) -> list[list[float]]:
    """``n`` sequential requests to each of ``urls``, in ``rounds`` alternating blocks (after a
    short warm-up of each, then ``warmed()`` if given), so a change in the machine's load hits them alike."""
    for url in urls:
        sequential(url, body, 20, token)
    if warmed is not None:
        warmed()
    times: list[list[float]] = [[] for _ in urls]
    block = -(-n // rounds)
    for _ in range(rounds):
        for i, url in enumerate(urls):
            times[i] += sequential(url, body, block, token)
    return times


def concurrent(url: str, body: str, clients: int, total: int, token: str | None) -> tuple[float, list[float], int]:
    per_client = -(-total // clients)

    def worker(_: int) -> tuple[list[float], int]:
        s, times, errors = session(token), [], 0
        for _ in range(per_client):
            start = time.perf_counter()
            try:
                ok = s.post(url + PATH, data=body, timeout=60).status_code == 200
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


def concurrent_side_by_side(urls: list[str], body: str, clients: int, total: int, token: str | None,
                            rounds: int = 4) -> tuple[list[tuple[float, list[float], int]], list[dict[str, float]]]:
    """:func:`concurrent` against each of ``urls`` in ``rounds`` alternating blocks of
    ``total / rounds`` requests: per url, the summed wall time, all latencies, all errors; and per
    url the CPU milliseconds per request of each process role (:data:`ROLES`; empty off Linux)."""
    results: list[tuple[float, list[float], int]] = [(0.0, [], 0) for _ in urls]
    spent: list[dict[str, float]] = [{} for _ in urls]
    for _ in range(rounds):
        for i, url in enumerate(urls):
            before = cpu_seconds(ROLES)
            wall, times, errors = concurrent(url, body, clients, -(-total // rounds), token)
            after = cpu_seconds(ROLES)
            results[i] = (results[i][0] + wall, results[i][1] + times, results[i][2] + errors)
            for role, value in per_request_ms(before, after, 1).items():
                spent[i][role] = spent[i].get(role, 0.0) + value
    per_request = [{role: value / max(1, len(times)) for role, value in cpu.items()}
                   for cpu, (_, times, _) in zip(spent, results)]
    return results, per_request


ROLES = {
    "proxy": "ray::ProxyActor",
    "service replica": f"ray::ServeReplica:{APP_NAME}:",
    "floor replica": f"ray::ServeReplica:{FLOOR_APP}:",
    "FastAPI floor replica": f"ray::ServeReplica:{FASTAPI_FLOOR_APP}:",
    "routed service replica": f"ray::ServeReplica:{ROUTED_APP}:",
}
"""The processes whose CPU :func:`concurrent_side_by_side` accounts (by command line)."""


def cpu_breakdown(label: str, cpu: dict[str, float]) -> str:
    """One line: the CPU ms per request of each role that spent any."""
    parts = [f"{role} {value:.2f}" for role, value in cpu.items() if value >= 0.005]
    return f"{'':30s} {label:22s} CPU ms/request: " + ", ".join(parts) + f"; all {sum(cpu.values()):.2f}"


REPORT_INTERVAL_MS = 10_000
"""How often the replicas send their metrics to Ray's agent: Ray's default, left as it is, since
every Ray process exports that often and a shorter interval costs CPU the service's latency
would show (each reading here waits for one and a half of them)."""


def _summed(metrics_url: str | None, pattern: str) -> tuple[float, float]:
    """(sum, count) of the samples ``pattern``'s group 1 names, over every series (replica), once
    two readings a report interval and a half apart agree; (nan, nan) without a metrics URL."""
    if metrics_url is None:
        return math.nan, math.nan

    def read() -> tuple[float, float]:
        found = {"sum": 0.0, "count": 0.0}
        for m in re.finditer(pattern, requests.get(metrics_url, timeout=10).text, re.MULTILINE):
            found[m.group(1)] += float(m.group(2))
        return found["sum"], found["count"]

    value, deadline = read(), time.monotonic() + 4 * REPORT_INTERVAL_MS / 1000
    while time.monotonic() < deadline:
        time.sleep(1.5 * REPORT_INTERVAL_MS / 1000)
        now = read()
        if now == value:
            break
        value = now
    return value


def batch_sizes(metrics_url: str | None) -> tuple[float, float]:
    return _summed(metrics_url, r'^ray_deepshare_serve_scorer_batch_size_(sum|count)\{(?=[^}]*application="%s")[^}]*\} (\S+)$'
                   % APP_NAME)


def replica_seconds(metrics_url: str | None) -> tuple[float, float]:
    """(sum, count) of the service's own request durations for /v1/placements (from its outermost
    middleware to its answer: the part of a request's time spent in the replica's app), of the
    service's application alone (with ``--routed`` the routed service records the same metric)."""
    return _summed(metrics_url, r'^ray_deepshare_serve_request_duration_seconds_(sum|count)\{(?=[^}]*application="%s")'
                   r'(?=[^}]*route="/v1/placements")[^}]*\} (\S+)$' % APP_NAME)


def serve_pair(policy: str, port: int, metrics_port: int, routed: bool = False) -> None:
    """(Subprocess) The placement service at ``/`` and the floors at ``/floor`` and ``/fastapi-floor`` on one
    private loopback Ray instance and one proxy, until SIGTERM; with ``routed``, the service without its
    routing bypass at ``/routed`` too."""
    from fastapi import FastAPI
    from ray import serve

    from deepshare.infra.localray import init_local_ray
    from deepshare.serving.deployment import MAX_ONGOING_REQUESTS, PlacementService, resolve_settings, service_app
    from deepshare.serving.settings import ServiceSettings

    # Half a logical CPU each, so the service and both floors fit on the 2 CPUs declared below
    # (a reservation only: every replica process may use what the machine gives it).
    @serve.deployment(name="ServeFloor", max_ongoing_requests=MAX_ONGOING_REQUESTS, ray_actor_options={"num_cpus": 0.5})
    class ServeFloor:
        async def __call__(self, request: Request) -> Response:
            await request.body()
            return Response(FLOOR_BODY, media_type="application/json")

    fastapi_floor = FastAPI()

    @fastapi_floor.post(PATH)
    async def fixed(request: Request) -> Response:
        await request.body()
        return Response(FLOOR_BODY, media_type="application/json")

    @serve.deployment(name="FastAPIFloor", max_ongoing_requests=MAX_ONGOING_REQUESTS, ray_actor_options={"num_cpus": 0.5})
    @serve.ingress(fastapi_floor)
    class FastAPIFloor:
        """The same answer from a one-route FastAPI app (``@serve.ingress``, as the service is)."""

    stop = threading.Event()
    init_local_ray(num_cpus=3 if routed else 2, include_dashboard=False, log_to_driver=False, _metrics_export_port=metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
        settings = resolve_settings(ServiceSettings(policy=policy))
        serve.run(service_app(settings, 1), name=APP_NAME, route_prefix="/", blocking=False)
        if routed:  # the same deployment and settings, placement requests through FastAPI's route
            serve.run(PlacementService.options(name="PlacementServiceRouted").bind(settings.model_dump(), skip_routing=False),
                      name=ROUTED_APP, route_prefix=ROUTED_PREFIX, blocking=False)
        serve.run(ServeFloor.bind(), name=FLOOR_APP, route_prefix=FLOOR_PREFIX, blocking=False)
        serve.run(FastAPIFloor.bind(), name=FASTAPI_FLOOR_APP, route_prefix=FASTAPI_FLOOR_PREFIX, blocking=False)
        print("ready", flush=True)
        stop.wait()
    finally:
        import ray

        serve.shutdown()
        ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def started_service(policy: str, token: str | None, routed: bool = False) -> Iterator[tuple[str, str]]:
    """(service URL, its Ray instance's metrics URL) of a ``--serve-pair`` subprocess (``routed``:
    with the service without its routing bypass at ``/routed``)."""
    port, metrics_port = free_port(), free_port()
    env = dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="ray-"))
    if token:
        env["DEEPSHARE_SERVE_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve-pair", str(port), "--metrics-port", str(metrics_port),
         "--policy", policy, *(["--routed"] if routed else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        PlacementClient(url).wait_ready(timeout_s=300, alive=lambda: proc.poll() is None)
        deadline = time.monotonic() + 120
        for prefix in (FLOOR_PREFIX, FASTAPI_FLOOR_PREFIX):  # the floors are deployed after the service
            while time.monotonic() < deadline:
                try:
                    if requests.post(url + prefix + PATH, data=b"{}", timeout=5).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.5)
        while routed and time.monotonic() < deadline:
            try:
                if session(token).post(url + ROUTED_PREFIX + PATH, data=json.dumps(small_request()), timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        yield url, f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def verdict(ratio: float, target: float, at_most: bool) -> str:
    ok = ratio <= target if at_most else ratio >= target
    return f"{ratio:5.2f}x  (target {'<=' if at_most else '>='} {target:g}x: {'met' if ok else 'NOT met'})"


def run(url: str, metrics_url: str | None, floors: dict[str, str], args: argparse.Namespace) -> None:
    """``floors``: label -> URL of each trivial app measured beside the service (the targets refer
    to the one labelled :data:`SERVE_FLOOR`; without it they are said not measured);
    ``metrics_url``: the Ray metrics agent the service's replicas report to (None: no in-replica
    time or batch sizes)."""
    cases = {"small (4 nodes, 3 pending)": small_request(), "large (64 nodes, 64 pending)": large_request()}
    cases = {name: request for name, request in cases.items() if name.split()[0] in args.cases}
    print(f"policy {args.policy}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start; "
          f"service at {url}" + "".join(f", {label} at {u}" for label, u in floors.items()) + "\n")
    print(f"{'case':30s} {'mode':22s} {'req/s':>8s} {'decisions/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s} {'errors':>6s}")
    summary = []
    labels, urls = list(floors), list(floors.values())
    serve = labels.index(SERVE_FLOOR) if SERVE_FLOOR in floors else None  # the yardstick of the targets
    if serve is None:
        summary.append(f"issue 14's targets (over the {SERVE_FLOOR}): not measured, no {SERVE_FLOOR} in this run")
    for name, request in cases.items():
        body = json.dumps(request)
        pending = len(request["pending"])
        base = floor(args.policy, body, args.sequential)
        print(f"{name:30s} {'in-process (floor)':22s} {'':>8s} {'':>12s} {ms(pct(base, .5)):>8s} {ms(pct(base, .99)):>8s}")
        idle = floor(args.policy, body, args.sequential, IDLE_S)
        print(f"{'':30s} {f'in-process, {IDLE_S * 1e3:g} ms idle':22s} {'':>8s} {'':>12s} {ms(pct(idle, .5)):>8s} "
              f"{ms(pct(idle, .99)):>8s}   (each call after a {IDLE_S * 1e3:g} ms sleep)")
        before: list[tuple[float, float]] = []  # read after the warm-up: its requests are not timed
        seqs = side_by_side([url] + urls, body, args.sequential, args.token,
                            warmed=lambda: before.append(replica_seconds(metrics_url)))
        before_sum, before_count = before[0]
        after = replica_seconds(metrics_url)
        in_app = (after[0] - before_sum) / max(1.0, after[1] - before_count)
        seq = seqs[0]
        for label, fl in zip(labels, seqs[1:]):
            print(f"{'':30s} {f'{label} seq x{len(fl)}':22s} {len(fl) / sum(fl):8.0f} {'':>12s} "
                  f"{ms(pct(fl, .5)):>8s} {ms(pct(fl, .99)):>8s} {0:6d}")
        if serve is not None:
            print(f"{'':30s} {'p50 above Serve floor':22s} {'':>8s} {'':>12s} {ms(pct(seq, .5) - pct(seqs[1 + serve], .5)):>8s}"
                  f"   (mean time in the replica's app: {ms(in_app)} ms)")
        print(f"{'':30s} {'sequential x%d' % len(seq):22s} {len(seq) / sum(seq):8.0f} {pending * len(seq) / sum(seq):12.0f} "
              f"{ms(pct(seq, .5)):>8s} {ms(pct(seq, .99)):>8s} {0:6d}")
        print(f"{'':30s} {'overhead over floor':22s} {'':>8s} {'':>12s} {pct(seq, .5) / pct(base, .5):7.1f}x "
              f"{pct(seq, .99) / pct(base, .99):7.1f}x")
        args.record.add(f"{name}: in-process decision, p50", pct(base, .5) * 1e3, "ms")
        args.record.add(f"{name}: sequential over HTTP, p50", pct(seq, .5) * 1e3, "ms")
        args.record.add(f"{name}: sequential over HTTP, p99", pct(seq, .99) * 1e3, "ms")
        if serve is not None:
            fl = seqs[1 + serve]
            args.record.add(f"{name}: sequential p50 over the Serve floor's", pct(seq, .5) / pct(fl, .5), "x", at_most=TARGET_P50)
            args.record.add(f"{name}: sequential p99 over the Serve floor's", pct(seq, .99) / pct(fl, .99), "x", at_most=TARGET_P99)
            summary.append(f"{name}: sequential p50 over the Serve floor {verdict(pct(seq, .5) / pct(fl, .5), TARGET_P50, True)}")
            summary.append(f"{name}: sequential p99 over the Serve floor {verdict(pct(seq, .99) / pct(fl, .99), TARGET_P99, True)}")
        for label, other in zip(labels, seqs[1:]):
            if label != SERVE_FLOOR:
                summary.append(f"{name}: sequential p50 over the {label} {pct(seq, .5) / pct(other, .5):5.2f}x (no target)")
        for clients in args.clients:
            against = urls if clients == 8 else []
            before = batch_sizes(metrics_url)
            runs, cpu = concurrent_side_by_side([url] + against, body, clients, args.requests, args.token)
            after = batch_sizes(metrics_url)
            for label, (fwall, ftimes, ferrors) in zip(labels, runs[1:]):
                print(f"{'':30s} {f'{label} {clients} x {len(ftimes)}':22s} {len(ftimes) / fwall:8.0f} {'':>12s} "
                      f"{ms(pct(ftimes, .5)):>8s} {ms(pct(ftimes, .99)):>8s} {ferrors:6d}")
            wall, times, errors = runs[0]
            passes = after[1] - before[1]
            mean_batch = (after[0] - before[0]) / passes if passes else float("nan")
            print(f"{'':30s} {'%d clients x %d' % (clients, len(times)):22s} {len(times) / wall:8.0f} "
                  f"{pending * len(times) / wall:12.0f} {ms(pct(times, .5)):>8s} {ms(pct(times, .99)):>8s} {errors:6d}"
                  f"   mean scorer batch {mean_batch:.2f}")
            if cpu[0].get("service replica"):
                print(cpu_breakdown("  service", cpu[0]))
                for label, spent in zip(labels, cpu[1:]):
                    print(cpu_breakdown(f"  {label}", spent))
            args.record.add(f"{name}: {clients} concurrent clients", len(times) / wall, "req/s", note=f"{errors} errors")
            if against:
                rate = len(times) / wall
                if serve is not None:
                    fwall, ftimes, _ = runs[1 + serve]
                    args.record.add(f"{name}: 8-client req/s over the Serve floor's", rate / (len(ftimes) / fwall), "x",
                                    at_least=TARGET_THROUGHPUT)
                    summary.append(f"{name}: 8-client req/s over the Serve floor's "
                                   f"{verdict(rate / (len(ftimes) / fwall), TARGET_THROUGHPUT, False)}")
                for label, (owall, otimes, _) in zip(labels, runs[1:]):
                    if label != SERVE_FLOOR:
                        summary.append(f"{name}: 8-client req/s over the {label}'s {rate / (len(otimes) / owall):5.2f}x (no target)")
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end (1, 5, 15 min)")
    for line in summary:
        print(line)
    print("the in-process floor, the floors and the service are measured in this one run, side by side")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an already running service (default: start one on a free loopback port)")
    parser.add_argument("--floor-url", help="with --url: a trivial Serve app to compare with (POST FLOOR_URL/v1/placements)")
    parser.add_argument("--no-floor-app", dest="floor_app", action="store_false",
                        help="skip the floors (default: measure them beside the service)")
    parser.add_argument("--policy", default="rl-hybrid", help="policy to serve and to call in-process (default rl-hybrid)")
    parser.add_argument("--token", help="bearer token of the service at --url")
    parser.add_argument("--sequential", type=int, default=500, help="sequential requests (default 500)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level (default 2000)")
    parser.add_argument("--cases", type=lambda s: s.split(","), default=["small", "large"], help="default small,large")
    parser.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[8, 32], help="default 8,32")
    parser.add_argument("--routed", action="store_true",
                        help="measure the service without its routing bypass beside it (at /routed, same settings)")
    parser.add_argument("--metrics-url", help="with --url: the Ray metrics agent its replicas report to (.../metrics)")
    parser.add_argument("--serve-pair", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    add_json_flag(parser)
    args = parser.parse_args()
    if args.serve_pair:
        serve_pair(args.policy, args.serve_pair, args.metrics_port, args.routed)
        return
    args.record = Record("serve_load", args.json)
    if args.url:
        run(args.url.rstrip("/"), args.metrics_url, {SERVE_FLOOR: args.floor_url.rstrip("/")} if args.floor_url else {}, args)
    else:
        args.token = args.token or "bench-token-0123"
        with started_service(args.policy, args.token, args.routed) as (url, metrics_url):
            floors = {SERVE_FLOOR: url + FLOOR_PREFIX, FASTAPI_FLOOR: url + FASTAPI_FLOOR_PREFIX} if args.floor_app else {}
            if args.routed:
                floors[ROUTED] = url + ROUTED_PREFIX
            run(url, metrics_url, floors, args)
    args.record.write()


if __name__ == "__main__":
    main()
