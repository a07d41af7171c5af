"""Keep the cyclic garbage collector off the objects a long-running process starts with.

Only a process's entry point calls :func:`freeze_long_lived`, once, after start-up (the
placement service's replica does, in its constructor): it changes the whole interpreter's
collector, which library code must not. Decisions themselves no longer freeze and unfreeze the
heap around each call: ``gc.unfreeze()`` also unfroze whatever the host application had frozen,
and once the replica's start-up heap is frozen, a per-decision freeze buys nothing measurable
(``bench/gc_freeze.py``).
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect, then move every object alive now into the collector's permanent generation
    (``gc.freeze``), for the rest of the process: the modules, the loaded policy and the caches of
    a service are never walked again by the collector's full passes. Garbage made later is
    collected as before. For a process's entry point only, once start-up is done."""
    gc.collect()
    gc.freeze()
