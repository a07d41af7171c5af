"""bench/crux_anchor.py counts a job as slowed >= 1.05x when its slowdown is 1.05 or more: its mean
throughput ratio at most 1/1.05 (it took ``< 0.95``, which left slowdowns of 1.050-1.0526 out), and
>= 1.01x likewise."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _job(ratio: float, gpus: int = 8) -> SimpleNamespace:
    return SimpleNamespace(finish_s=100.0, productive_s=50.0, mean_ratio=ratio, gpus=gpus)


def test_the_thresholds_are_the_slowdowns_the_labels_name(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    from crux_anchor import shares

    # slowdowns 1.0515 and exactly 1.05 are slowed >= 1.05x; 1.0101 and exactly 1.01 are slowed >= 1.01x
    jobs = [_job(0.951), _job(1 / 1.05), _job(0.99), _job(1 / 1.01), _job(0.995), _job(1.0)]
    job_share, gpu_share, _, counted, touched = shares(jobs)
    assert counted == 6
    assert job_share == pytest.approx(2 / 6) and gpu_share == pytest.approx(2 / 6)
    assert touched == pytest.approx(4 / 6)
