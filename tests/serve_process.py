"""A real ``deepshare serve`` subprocess on a free loopback port, for the module-scoped fixtures of
``test_serving_http.py`` and ``adversarial/test_service_http.py`` (one service per module)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from deepshare.serving.client import PlacementClient, PlacementServiceError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServeProcess:
    url: str
    port: int
    proc: subprocess.Popen
    log: Path


@contextmanager
def serve_process(tmp_path_factory, token: str, *flags: str, ready_timeout_s: float = 120.0) -> Iterator[ServeProcess]:
    """Start ``deepshare serve --port P FLAGS`` with ``$DEEPSHARE_SERVE_TOKEN=token`` and its own
    ``RAY_TMPDIR``; yield once it answers; SIGTERM it afterwards (killed after 60 s) unless a
    test already stopped it. A service that does not come up fails the test with its log's tail."""
    port = free_port()
    env = dict(os.environ, DEEPSHARE_SERVE_TOKEN=token, RAY_TMPDIR=str(tmp_path_factory.mktemp("ray")))
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "deepshare", "serve", "--port", str(port), *flags],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        PlacementClient(url).wait_ready(timeout_s=ready_timeout_s, alive=lambda: proc.poll() is None)
    except PlacementServiceError as exc:
        proc.kill()
        pytest.fail(f"{exc}:\n{log.read_text()[-3000:]}")
    try:
        yield ServeProcess(url, port, proc, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
