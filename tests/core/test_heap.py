"""The garbage collector is the process's: library code never freezes or unfreezes it.

Only an entry point calls :func:`freeze_long_lived` (the placement service's replica, once, at
start-up); a decision leaves the collector as it found it, including what a host application
froze itself (a per-decision ``gc.unfreeze()`` used to unfreeze that too).
"""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np

from deepshare.core.heap import freeze_long_lived


def test_a_learned_decision_leaves_the_hosts_frozen_heap_frozen() -> None:
    from deepshare.policies.learned import drive

    seen = []

    def steps():  # type: ignore[no-untyped-def]
        yield {"observations": None}
        return "decided"

    def scorer(obs):  # type: ignore[no-untyped-def]
        seen.append(gc.get_freeze_count())
        return np.zeros(1)

    gc.freeze()  # the host application's own choice
    try:
        frozen = gc.get_freeze_count()
        assert drive(steps(), scorer) == "decided"
        assert seen == [frozen] and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_decision_in_the_service_engine_leaves_the_collector_alone() -> None:
    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.samples import scale_request
    from deepshare.serving.schemas import PlacementRequest

    engine = PlacementEngine(EngineSettings(policy="rl-hybrid"))
    request = PlacementRequest.model_validate(scale_request(8, 20))
    assert gc.get_freeze_count() == 0
    gc.disable()  # also a host's choice: a decision must not turn the collector back on
    try:
        engine.place(request)
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_freeze_long_lived_moves_the_heap_out_of_the_walks_for_good() -> None:
    code = (
        "import gc; from deepshare.core.heap import freeze_long_lived; freeze_long_lived(); "
        "n = gc.get_freeze_count(); x = [[] for _ in range(10)]; gc.collect(); "
        "print(n > 0, gc.get_freeze_count() == n)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_the_package_calls_gc_only_in_its_entry_points() -> None:
    """``gc.freeze``/``unfreeze``/``disable``/``enable``/``set_threshold`` change the whole
    interpreter: the only caller is :func:`freeze_long_lived`, and only entry points call that."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "deepshare"
    calls = re.compile(r"\bgc\.(freeze|unfreeze|disable|enable|set_threshold)\(")
    users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py") if calls.search(p.read_text()))
    assert users == ["core/heap.py"]
    callers = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                     if "freeze_long_lived(" in p.read_text() and p.name != "heap.py")
    assert callers == ENTRY_POINTS


ENTRY_POINTS = ["serving/deployment.py"]
"""Modules whose code runs as a process's entry point and may call ``freeze_long_lived``: the
placement service's replica constructor (Serve gives each replica a process of its own)."""
