"""Run functions in threads that switch often: how tests make a data race show."""

from __future__ import annotations

import sys
import threading
from typing import Callable


def run_interleaved(targets: list[Callable[[], None]], switch_s: float = 1e-5) -> None:
    """Run each of ``targets`` in a thread of its own, the interpreter switching threads every
    ``switch_s`` (a busy server's pace, not the 5 ms default), and wait for them all."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(switch_s)
    try:
        threads = [threading.Thread(target=target) for target in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
