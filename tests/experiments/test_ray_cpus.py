"""Runs on a Ray cluster with no CPU yet (an autoscaling cluster's head has none, and its CPU
demand makes the autoscaler start a node) are queued, not refused, and the wait is said; so is
the wait on a cluster whose CPUs are all busy. Ray's answers are stood in for here (no cluster is
started)."""

from __future__ import annotations

import pytest

from deepshare.experiments.suite import SuiteSpec, cells, run_policies

ray = pytest.importorskip("ray")

SPEC = SuiteSpec(name="z", jobs_per_node=2, loads=(1.0,), mixes=("random",), clusters=((2, 4),),
                 contention=("profiled",), seeds=1, durations=("exact",), heuristics=("srsf+packed",))


class Submitted(Exception):
    """Raised where the runs would have been handed to Ray."""


def submitted(fn):
    raise Submitted


NO_CPU_YET = ("no CPU in the Ray cluster yet: waiting for a node (an autoscaler starts one for the queued runs); "
              "Ctrl-C stops")


def test_a_cluster_with_no_cpu_yet_gets_the_runs_and_the_wait_is_said(monkeypatch):
    """The project's autoscaling clusters (cluster_yamls/aws-gpu-mixed.yaml, kuberay-autoscaling.yaml)
    start with a head of no CPU and no worker: the queued runs are what makes a worker start."""
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"GPU": 1.0})
    monkeypatch.setattr(ray, "available_resources", lambda: {"GPU": 1.0})
    monkeypatch.setattr(ray, "remote", submitted)
    said: list[tuple[int, str]] = []
    with pytest.raises(Submitted):
        run_policies(SPEC, cells(SPEC), SPEC.heuristics, on_ray=True, progress=lambda d, n, what: said.append((d, what)))
    assert said == [(0, NO_CPU_YET)]


def test_compare_on_a_cluster_with_no_cpu_yet_says_it_waits(monkeypatch):
    from deepshare.core.topology import uniform
    from deepshare.core.traces import generate, mix_preset
    from deepshare.experiments.scenario import Scenario, compare

    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    monkeypatch.setattr(ray, "available_resources", lambda: {})
    monkeypatch.setattr(ray, "remote", submitted)
    said: list[str] = []
    with pytest.raises(Submitted):
        compare(Scenario(uniform(2, 4), generate(4, load=1.0, total_gpus=8, mix=mix_preset("heavy"), seed=1).jobs), ["srsf+packed"], on_ray=True, waiting=said.append)
    assert said == [NO_CPU_YET]


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
