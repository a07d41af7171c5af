"""``bench/scale.py --cluster``: the fabric preset and the flat cluster of the same size it is
measured beside (the same nodes and hardware, the fabric's levels dropped)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.core.topology import load_topology

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("preset", ["h100-leafspine-2to1", "clos3-256"])
def test_the_flat_cluster_is_the_preset_without_its_fabric(preset, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder
    from scale import cluster_of

    fabric, flat = cluster_of(preset, False), cluster_of(preset, True)
    assert fabric.fabric.levels == load_topology(preset).fabric.levels and len(fabric.fabric.levels) >= 2
    assert [level.name for level in flat.fabric.levels] == ["rack"]
    assert flat.capacity == fabric.capacity and flat.total_gpus == fabric.total_gpus
    assert [n.name for n in flat.nodes] == [n.name for n in fabric.nodes]
    assert [n.gpu_model for n in flat.nodes] == [n.gpu_model for n in fabric.nodes]
