"""A real ``deepshare serve`` subprocess on a free loopback port, for the module-scoped fixtures of
``test_serving_http.py``, ``test_serving_replicas.py`` and ``adversarial/test_service_http.py``
(one service per module), and reading its metrics from the private Ray instance's metrics agent.

The service runs with ``RAY_metrics_report_interval_ms`` = :data:`REPORT_INTERVAL_MS`, so what a
replica records reaches the agent within about a second (Ray's default is 10 s); tests still
poll (:func:`metric_settles_at`), never read once."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from deepshare.serving.client import PlacementClient, PlacementServiceError


FIXED_PORTS = range(20000, 32768)
"""Where :func:`free_port` picks: below Linux's ephemeral range (32768-60999), from which every
``bind(0)`` of the other tests' servers draws. A port picked there was free when picked, but a
server started meanwhile by another test worker could take it before `deepshare serve` bound it
(seconds later), and then answered this module's requests (a CI run of 2026-12-05)."""


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range (:data:`FIXED_PORTS`)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.choice(FIXED_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {FIXED_PORTS}")


REPORT_INTERVAL_MS = 1000
"""How often each replica sends its metrics to the agent in these tests (Ray floors it at 1 s)."""


@dataclass
class ServeProcess:
    url: str
    port: int
    proc: subprocess.Popen
    log: Path
    metrics_url: str
    """The private Ray instance's metrics agent (``--metrics-port``): ``.../metrics``."""


def scrape(metrics_url: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of one scrape as ``(name, labels, value)`` (Prometheus' text format)."""
    import requests

    samples = []
    for line in requests.get(metrics_url, timeout=10).text.splitlines():
        match = re.fullmatch(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if match and not line.startswith("#"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric(metrics_url: str, name: str, **labels: str) -> float:
    """The sum of ``name`` over every series whose labels include ``labels`` (all replicas)."""
    return total(scrape(metrics_url), name, labels)


def total(samples: list[tuple[str, dict[str, str], float]], name: str, labels: dict[str, str]) -> float:
    """The sum of ``name`` over the ``samples`` whose labels include ``labels``."""
    return sum(v for n, have, v in samples if n == name and all(have.get(k) == w for k, w in labels.items()))


def metric_settles_at(metrics_url: str, name: str, expected: float, timeout: float = 30.0, **labels: str) -> float:
    """Poll until ``metric(...)`` equals ``expected`` (replicas report every second); its last value."""
    deadline = time.monotonic() + timeout
    while (value := metric(metrics_url, name, **labels)) != expected and time.monotonic() < deadline:
        time.sleep(0.25)
    return value


QUIET_S = 2.5 * REPORT_INTERVAL_MS / 1000
"""How long a metric must stay unchanged to count as settled: two and a half report intervals."""


def settled(metrics_url: str, name: str, quiet_s: float = QUIET_S, **labels: str) -> float:
    """``metric(...)`` once it stopped changing for ``quiet_s`` (everything recorded so far reported)."""
    return settled_all(metrics_url, {name: (name, labels)}, quiet_s)[name]


def settled_all(metrics_url: str, series: dict[str, tuple[str, dict[str, str]]], quiet_s: float = QUIET_S) -> dict[str, float]:
    """Each ``key: (name, labels)`` of ``series`` as :func:`metric` reads it, once none of them changed
    for ``quiet_s``: one wait for all of them, each poll one scrape."""

    def read() -> dict[str, float]:
        samples = scrape(metrics_url)
        return {key: total(samples, name, labels) for key, (name, labels) in series.items()}

    values, since = read(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.25)
        now = read()
        if now != values:
            values, since = now, time.monotonic()
    return values


@contextmanager
def serve_process(tmp_path_factory, token: str, *flags: str, ready_timeout_s: float = 120.0) -> Iterator[ServeProcess]:
    """Start ``deepshare serve --port P FLAGS`` with ``$DEEPSHARE_SERVE_TOKEN=token`` and its own
    ``RAY_TMPDIR``; yield once it answers; SIGTERM it afterwards (killed after 60 s) unless a
    test already stopped it. A service that does not come up is started once more (a loaded
    machine has timed out a Ray start); a second failure fails the test with both logs' tails."""
    failures = []
    for _attempt in range(2):
        started = _start(tmp_path_factory, token, flags, ready_timeout_s)
        if isinstance(started, str):
            failures.append(started)
            continue
        process, ray_tmp = started
        try:
            yield process
        finally:
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGTERM)
                try:
                    process.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.proc.kill()
            shutil.rmtree(ray_tmp, ignore_errors=True)
        return
    pytest.fail("\n\n".join(failures))


def _start(tmp_path_factory, token: str, flags: tuple[str, ...], ready_timeout_s: float) -> tuple[ServeProcess, str] | str:
    """One start of the service: it and its Ray folder once it answers, else why not (its log's tail)."""
    port, metrics_port = free_port(), free_port()
    ray_tmp = tempfile.mkdtemp(prefix="ds-serve-")  # short: Ray's socket paths must stay < 108 bytes (pytest's
    # own temp folders grow with the xdist worker's name)
    env = dict(os.environ, DEEPSHARE_SERVE_TOKEN=token, RAY_TMPDIR=ray_tmp,
               RAY_metrics_report_interval_ms=str(REPORT_INTERVAL_MS))
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "deepshare", "serve", "--port", str(port),
                                 "--metrics-port", str(metrics_port), *flags],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        PlacementClient(url).wait_ready(timeout_s=ready_timeout_s, alive=lambda: proc.poll() is None)
        _said_ready(proc, log)  # it, not another server that took the port, answered
    except PlacementServiceError as exc:
        proc.kill()
        proc.wait(timeout=60)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        return f"{exc}:\n{log.read_text(errors='replace')[-3000:]}"
    return ServeProcess(url, port, proc, log, f"http://127.0.0.1:{metrics_port}/metrics"), ray_tmp


def _said_ready(proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    """Wait for the process's own ready line (:data:`~deepshare.cli.serve.READY_LINE`), printed
    once its endpoint answers; :class:`PlacementServiceError` if it exits or never says it."""
    from deepshare.cli.serve import READY_LINE

    deadline = time.monotonic() + timeout_s
    while READY_LINE not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise PlacementServiceError("the service never said it was ready (another server on its port?)")
        time.sleep(0.2)
