"""bench/replay_match.py counts a batch's steps whose (sequence, step index) another env's step
shares: what the learner's ``baseline_matched`` reports."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_shares_are_deterministic_under_a_seed_and_every_step_of_a_lone_env_is_unmatched(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import their helpers from their own folder
    import replay_match

    with_clock = replay_match.batches_matched(4, 2, 15, 2, True, 3)
    assert with_clock == replay_match.batches_matched(4, 2, 15, 2, True, 3)
    assert len(with_clock) == 2 and all(0.0 <= m <= 1.0 and 0.0 <= f <= 1.0 for m, f in with_clock)
    # groups of one env: no step has a partner and none waits for one, whichever way they count
    assert replay_match.batches_matched(2, 1, 15, 2, True, 3) == [(0.0, 0.0), (0.0, 0.0)]
    assert replay_match.batches_matched(2, 1, 15, 2, False, 3) == [(0.0, 0.0), (0.0, 0.0)]
    assert all(f == 0.0 for _, f in replay_match.batches_matched(4, 2, 15, 2, False, 3))  # fillers need a clock
