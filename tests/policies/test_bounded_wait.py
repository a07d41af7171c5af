"""Bounded waiting (EncodingConfig.max_wait_s): a learned policy cannot leave a fitting job
queued longer than the bound, whatever its network prefers; a policy file carries its bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepshare.core.contention import make_contention
from deepshare.core.simulator import Simulator
from deepshare.core.topology import load_topology
from deepshare.core.traces import load
from deepshare.policies import make_policy
from deepshare.policies.encoding import WAIT_INDEX, EncodingConfig
from deepshare.policies.learned import LearnedPolicy

TRACE = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


def always_wait(obs):
    scores = np.zeros(len(obs["action_mask"]))
    scores[WAIT_INDEX] = 1.0
    return scores


class Checked:
    """Runs ``inner`` and asserts, after every decision, that no queued job left waiting has
    waited ``bound`` seconds or more while it fits the GPUs the decision leaves free."""

    def __init__(self, inner: LearnedPolicy, bound: float) -> None:
        self.inner, self.bound, self.name = inner, bound, inner.name
        self.forced = 0

    def decide(self, view):  # type: ignore[no-untyped-def]
        decision = self.inner.decide(view)
        launched = {launch.job_id for launch in decision.launch}
        free = sum(view.free) - sum(launch.placement.total_gpus for launch in decision.launch)
        for job in view.queued:
            if job.job_id not in launched and view.now - job.queued_since >= self.bound:
                assert job.gpus > free, (view.now, job.job_id, job.gpus, free)
        self.forced += bool(decision.launch)
        return decision


@pytest.mark.parametrize("bound", [0.0, 600.0, 7200.0])
def test_a_network_that_always_waits_still_never_leaves_a_fitting_job_past_the_bound(bound):
    policy = Checked(LearnedPolicy("rl-base", always_wait, EncodingConfig(max_wait_s=bound)), bound)
    report = Simulator(load_topology("testbed"), load(TRACE).jobs, make_contention("profiled")).run(policy)
    assert report.finished == 256 and policy.forced > 0


def test_without_a_bound_the_same_network_leaves_jobs_waiting():
    unbounded = Simulator(load_topology("testbed"), load(TRACE).jobs, make_contention("profiled")).run(
        LearnedPolicy("rl-base", always_wait, EncodingConfig())
    )
    bounded = Simulator(load_topology("testbed"), load(TRACE).jobs, make_contention("profiled")).run(
        LearnedPolicy("rl-base", always_wait, EncodingConfig(max_wait_s=600.0))
    )
    assert bounded.gpu_util > unbounded.gpu_util


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_negative_or_nan_bound_is_refused(bad):
    with pytest.raises(ValueError, match="max_wait_s"):
        EncodingConfig(max_wait_s=bad)


def test_a_policy_file_is_served_with_the_bound_it_was_trained_with(tmp_path):
    import torch

    shipped = make_policy("rl-base")
    assert shipped.encoding.max_wait_s is None and shipped.metadata["checkpoint"].endswith("rl_est_imitation.pt")
    assert make_policy("rl-hybrid").metadata["checkpoint"].endswith("rl_est_ppo.pt")
    doc = torch.load(shipped.metadata["checkpoint"], weights_only=True)
    doc["encoding"]["max_wait_s"] = 1800.0
    torch.save(doc, tmp_path / "bounded.pt")
    assert make_policy(f"rl-base={tmp_path / 'bounded.pt'}").encoding.max_wait_s == 1800.0
