"""Keep the cyclic garbage collector off the objects that outlive a long computation.

A 10,000-launch decision allocates millions of short-lived objects, so CPython's collector runs
thousands of times; each oldest-generation pass walks every object the process holds (a
10,000-job view, 4,096 nodes, the loaded network, Ray and FastAPI in a replica), which was 8% of
such a decision. :func:`long_lived_frozen` moves the objects alive when it is entered into the
collector's permanent generation (``gc.freeze``) and back when the outermost use exits
(``gc.unfreeze``): the collector then walks only what the computation itself allocated. Nothing
is disabled: garbage made during the computation is collected as before, and a frozen object
that becomes garbage meanwhile is collected after the exit. Both calls are O(1).

Nested and concurrent uses (threads of one replica) share one count: the heap is frozen while
any use is active, unfrozen when the last one exits.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_active = 0


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Run the body with the objects alive now out of the collector's walks."""
    global _active
    with _lock:
        if _active == 0:
            gc.freeze()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                gc.unfreeze()
