"""One way the tests serve an ASGI app with the scheduler's own server: a ``uvicorn.Server`` from
:func:`deepshare.infra.httpserver.api_server` on a free loopback port, in a thread."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

START_S = 30.0
"""How long a server may take to start (generous: a loaded machine timed one out in CI-like runs)."""


@contextmanager
def served(server: Any) -> Iterator[int]:
    """``server`` running on a free loopback port for the block, started (or ``START_S`` passed):
    the port. Stopped, its thread joined and its socket closed afterwards."""
    from deepshare.runtime.service import bind

    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()
