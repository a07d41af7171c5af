"""The service's scorers, one observation or a batch, give bit for bit the scores the network's own modules compute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.samples import large_request, small_request
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.scoring import lone_scorer


@pytest.fixture(scope="module")
def engine() -> PlacementEngine:
    return PlacementEngine(EngineSettings("rl-hybrid"))


def observations(engine: PlacementEngine, body: dict) -> list[dict[str, np.ndarray]]:
    seen: list[dict[str, np.ndarray]] = []
    scorer = engine.policy.scorer

    def record(obs):  # type: ignore[no-untyped-def]
        seen.append(obs)
        return scorer(obs)

    engine.place(PlacementRequest.model_validate(body), score=record)
    return seen


def _network_scores(net, observations):  # type: ignore[no-untyped-def]
    """What the network's own modules compute for a batch on one thread (as every scorer runs):
    the reference a batch must equal."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            rows = torch.from_numpy(np.stack([o["observations"] for o in observations]))
            mask = torch.from_numpy(np.stack([o["action_mask"] for o in observations]))
            return list(net(rows, mask)[0].numpy())
    finally:
        torch.set_num_threads(threads)


def test_the_shortcut_applies_to_the_shipped_policy(engine):
    batch = engine.batch_scorer
    assert lone_scorer(batch) is batch.__self__ and batch.__self__.has_shortcut  # not the fallback lambda


@pytest.mark.parametrize("body", [small_request(), large_request()], ids=["small", "large"])
def test_same_scores_as_a_batch_of_one_on_real_observations(engine, body):
    seen = observations(engine, body)
    assert seen
    lone = lone_scorer(engine.batch_scorer)
    for obs in seen:
        expected = _network_scores(engine.policy.scorer.net, [obs])[0]
        got = lone(obs)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 40), seed=st.integers(0, 2**32 - 1), masked=st.floats(0.0, 1.0))
def test_same_scores_as_a_batch_of_one_on_random_observations(engine, k, seed, masked):
    rng = np.random.default_rng(seed)
    features = engine.policy.scorer.net.features
    obs = {
        "observations": rng.normal(0, 3, (k, features)).astype(np.float32),
        "action_mask": (rng.random(k) >= masked).astype(np.float32),
    }
    assert np.array_equal(lone_scorer(engine.batch_scorer)(obs), _network_scores(engine.policy.scorer.net, [obs])[0])


def test_any_other_scorer_is_called_as_a_batch_of_one():
    calls = []

    def batch(observations):  # type: ignore[no-untyped-def]
        calls.append(len(observations))
        return [np.arange(3.0) for _ in observations]

    assert np.array_equal(lone_scorer(batch)({"observations": np.zeros((3, 2))}), np.arange(3.0))
    assert calls == [1]


def test_a_network_of_another_shape_is_scored_as_a_batch_of_one():
    """Only the shipped layers take the shortcut; any other network still scores, as a batch."""
    import torch

    from deepshare.policies.checkpoint import TorchScorer
    from deepshare.policies.scorer_net import CandidateScorer

    class Wider(CandidateScorer):  # a subclass may compute anything: no shortcut
        def forward(self, rows, mask):  # type: ignore[no-untyped-def]
            logits, embedded = super().forward(rows, mask)
            return logits * 2, embedded

    torch.manual_seed(0)
    plain, other = TorchScorer(CandidateScorer(3, 4).eval()), TorchScorer(Wider(3, 4).eval())
    assert plain.has_shortcut and not other.has_shortcut
    obs = {"observations": np.arange(6, dtype=np.float32).reshape(2, 3), "action_mask": np.array([1, 0], np.float32)}
    assert np.array_equal(other(obs), other.batch([obs])[0]) and np.array_equal(plain(obs), plain.batch([obs])[0])
    assert lone_scorer(other.batch) is other


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 20), k=st.integers(1, 24), seed=st.integers(0, 2**32 - 1), masked=st.floats(0.0, 1.0))
def test_a_batch_scores_exactly_what_the_network_computes(engine, b, k, seed, masked):
    """Several requests' observations scored together (the service batches them) get the
    network's scores bit for bit, each observation its own row of the batch."""
    rng = np.random.default_rng(seed)
    scorer = engine.policy.scorer
    batch = [
        {
            "observations": rng.normal(0, 3, (k, scorer.net.features)).astype(np.float32),
            "action_mask": (rng.random(k) >= masked).astype(np.float32),
        }
        for _ in range(b)
    ]
    got, expected = scorer.batch(batch), _network_scores(scorer.net, batch)
    assert len(got) == b
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == (k,)
        assert np.array_equal(g, e)


def test_a_batch_of_real_observations_scores_as_the_network(engine):
    seen = observations(engine, large_request()) + observations(engine, small_request())
    scorer = engine.policy.scorer
    got, expected = scorer.batch(seen), _network_scores(scorer.net, seen)
    assert all(np.array_equal(g, e) for g, e in zip(got, expected))


def _random_obs(features: int, k: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"observations": rng.normal(0, 3, (k, features)).astype(np.float32),
            "action_mask": (rng.random(k) >= 0.2).astype(np.float32)}


def test_scores_a_caller_keeps_are_not_overwritten_by_the_next_pass(engine):
    """The shortcut runs into buffers it reuses; the scores it hands back are the caller's own."""
    scorer = engine.policy.scorer
    first, second = (_random_obs(scorer.net.features, 16, seed) for seed in (1, 2))
    kept = scorer(first)
    before = kept.copy()
    scorer(second)
    scorer.batch([second, first])
    assert np.array_equal(kept, before)
    assert np.array_equal(kept, _network_scores(scorer.net, [first])[0])


def test_threads_scoring_at_once_each_get_the_networks_scores(engine):
    """A server scores from several threads: each thread's passes use buffers of its own."""
    from concurrent.futures import ThreadPoolExecutor

    scorer = engine.policy.scorer
    cases = [_random_obs(scorer.net.features, k, seed) for seed, k in enumerate((16, 16, 9, 16, 30, 16) * 4)]
    expected = [_network_scores(scorer.net, [obs])[0] for obs in cases]

    def score_all(offset: int) -> list[np.ndarray]:
        return [scorer(cases[(i + offset) % len(cases)]) for i in range(200)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(score_all, range(4)))
    for offset, got in enumerate(results):
        for i, scores in enumerate(got):
            assert np.array_equal(scores, expected[(i + offset) % len(cases)])


def test_rows_of_the_wrong_width_or_type_are_refused_in_one_line(engine):
    lone = engine.policy.scorer._lone
    features = engine.policy.scorer.net.features
    for rows in (np.zeros((4, features + 1), np.float32), np.zeros((4, features), np.float64), np.zeros(features, np.float32)):
        with pytest.raises(ValueError, match="expected rows of shape"):
            lone(rows, np.ones(4, np.float32))
