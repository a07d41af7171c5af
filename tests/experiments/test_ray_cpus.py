"""Runs on a Ray cluster with no CPU would wait forever without a word: such a cluster is refused
in one line before anything is submitted, and a cluster whose CPUs are all busy is said to be
waited for. Ray's answers are stood in for here (no cluster is started)."""

from __future__ import annotations

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.experiments.suite import SuiteSpec, cells, run_policies

ray = pytest.importorskip("ray")

SPEC = SuiteSpec(name="z", jobs_per_node=2, loads=(1.0,), mixes=("random",), clusters=((2, 4),),
                 contention=("profiled",), seeds=1, durations=("exact",), heuristics=("srsf+packed",))


class Submitted(Exception):
    """Raised where the runs would have been handed to Ray."""


def submitted(fn):
    raise Submitted


def test_a_cluster_with_no_cpu_is_refused_before_any_task(monkeypatch):
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"GPU": 1.0})
    monkeypatch.setattr(ray, "available_resources", lambda: {"GPU": 1.0})
    monkeypatch.setattr(ray, "remote", submitted)
    with pytest.raises(DeepShareError, match=r"^the Ray cluster has no CPU .* would wait forever") as info:
        run_policies(SPEC, cells(SPEC), SPEC.heuristics, on_ray=True)
    assert "\n" not in str(info.value)


def test_a_cluster_whose_cpus_are_all_busy_is_said_to_be_waited_for(monkeypatch):
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray, "available_resources", lambda: {})
    monkeypatch.setattr(ray, "remote", submitted)
    said: list[tuple[int, str]] = []
    with pytest.raises(Submitted):
        run_policies(SPEC, cells(SPEC), SPEC.heuristics, on_ray=True, progress=lambda d, n, what: said.append((d, what)))
    assert said == [(0, "waiting for a free CPU of the Ray cluster (every one is busy); the runs start as CPUs free up")]


def test_the_learning_curve_scores_here_on_a_cluster_with_no_cpu(monkeypatch):
    """Training may run on such a cluster (its env runner in the driver): the curve is scored in
    this process, as when training holds every CPU, not refused."""
    from deepshare.experiments import learning_curve

    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    monkeypatch.setattr(ray, "available_resources", lambda: {})
    monkeypatch.setattr(ray, "remote", submitted)
    said: list[str] = []
    curve = learning_curve.SuiteCurve("tiny", "rl-base", progress=said.append, on_ray=True)
    assert not curve._cluster_has_room()
    assert any("scoring in this process instead" in line for line in said)
