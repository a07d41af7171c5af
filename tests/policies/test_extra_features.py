"""The optional encoding columns (:mod:`deepshare.policies.extra_features`) on a hand-made
request: exact values, the base columns untouched, validation, and a policy file that carries them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.workloads import default_catalog
from deepshare.policies import make_policy
from deepshare.policies.encoding import FEATURES, EncodingConfig, PartialDecision, encode
from deepshare.policies.extra_features import EXTRA_FEATURES
from deepshare.rl.env import EnvConfig
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import request_to_view

TIME_EXTRAS = EXTRA_FEATURES[:4]
"""The anchor and time-left columns (the job columns have a test of their own)."""
EXTRAS = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=("srsf", "packed"), extra_features=TIME_EXTRAS)
PLAIN = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=("srsf", "packed"))


def hours(seconds: float) -> float:
    return math.log1p(seconds / 3600.0)


def view():
    """Two 8-GPU nodes: n0 runs r (4 GPUs, 7200 s left), n1 is free; a (2 GPUs, 600 s) and
    b (8 GPUs, 3600 s) are queued."""
    doc = {
        "now": 100.0,
        "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 4}, {"name": "n1", "gpus": 8, "free_gpus": 8}],
        "running": [{"job_id": "r", "model": "FSDP", "placement": {"n0": 4}, "remaining_s": 7200.0}],
        "pending": [
            {"job_id": "a", "model": "MobileNetV3", "gpus": 2, "submitted_at": 10.0, "remaining_s": 600.0},
            {"job_id": "b", "model": "FSDP", "gpus": 8, "submitted_at": 20.0, "remaining_s": 3600.0},
        ],
    }
    return request_to_view(PlacementRequest.model_validate(doc), default_catalog(), make_contention("profiled"))


def table(partial: PartialDecision, config: EncodingConfig) -> dict:
    obs, rows = encode(partial, config)
    extra = obs["observations"][: len(rows), len(FEATURES):]
    return {(r.job and r.job.job_id, r.placement and r.placement.alloc): tuple(np.round(e, 6)) for r, e in zip(rows, extra)}


def test_the_columns_on_a_hand_made_request():
    running = view()
    assert [(j.job_id, j.ratio) for j in running.running] == [("r", 1.0)]
    r_left = first = round(hours(7200.0), 6)  # r is the only running job
    got = table(PartialDecision(running), EXTRAS)
    # srsf+packed's pick is a on n0 (packed fills the busier node): row 1, the only is_anchor
    assert list(got)[:2] == [(None, None), ("a", ((0, 2),))]
    assert got[(None, None)] == (0.0, 0.0, 0.0, first)
    assert got[("a", ((0, 2),))] == (1.0, r_left, r_left, first)
    assert got[("a", ((0, 1), (1, 1)))] == (0.0, r_left, r_left, first)  # spread: n0 is touched
    assert got[("b", ((1, 8),))] == (0.0, 0.0, 0.0, first)
    assert got[("b", ((0, 4), (1, 4)))] == (0.0, r_left, r_left, first)


def test_launches_already_chosen_count_as_neighbours_with_their_remaining_work():
    partial = PartialDecision(view())
    obs, rows = encode(partial, EXTRAS)
    assert (rows[1].job.job_id, rows[1].placement.alloc) == ("a", ((0, 2),))
    got = table(partial.with_launch(rows[1].job, rows[1].placement), EXTRAS)
    # b on n1 alone (the anchor's pick now) meets nobody; split over n0 it meets r and a
    assert got[("b", ((1, 8),))] == (1.0, 0.0, 0.0, round(hours(7200.0), 6))
    assert got[("b", ((0, 2), (1, 6)))][1:3] == (round(hours(600.0), 6), round(hours(7200.0), 6))


def test_a_slowed_neighbour_lasts_longer_by_its_ratio():
    from dataclasses import replace

    before = view()
    slowed = replace(before, running=[replace(before.running[0], ratio=0.5)])
    got = table(PartialDecision(slowed), EXTRAS)
    assert got[("a", ((0, 2),))][1:] == (round(hours(14400.0), 6),) * 3


def test_the_base_columns_are_those_of_an_encoding_without_extras():
    partial = PartialDecision(view())
    with_extras, rows_x = encode(partial, EXTRAS)
    plain, rows_p = encode(PartialDecision(view()), PLAIN)
    assert [(r.job and r.job.job_id, r.placement and r.placement.alloc) for r in rows_x] == [
        (r.job and r.job.job_id, r.placement and r.placement.alloc) for r in rows_p
    ]
    assert with_extras["observations"].shape == (8, len(FEATURES) + 4) and plain["observations"].shape == (8, len(FEATURES))
    assert np.array_equal(with_extras["observations"][:, : len(FEATURES)], plain["observations"])
    assert np.array_equal(with_extras["action_mask"], plain["action_mask"])
    assert EXTRAS.features == FEATURES + TIME_EXTRAS and PLAIN.features == FEATURES


def test_without_an_anchor_no_row_is_marked():
    config = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None, extra_features=("is_anchor",))
    assert {v for v in table(PartialDecision(view()), config).values()} == {(0.0,)}


@pytest.mark.parametrize("names, says", [
    (("is_anchor", "nope"), "unknown extra features ['nope']"),
    (("next_finish_h", "is_anchor"), "in this order"),
    (("is_anchor", "is_anchor"), "distinct"),
])
def test_bad_extra_features_are_refused_naming_them(names, says):
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        EncodingConfig(extra_features=names)
    with pytest.raises(DeepShareError, match="env config: .*" + says.replace("[", r"\[").replace("]", r"\]")):
        EnvConfig.from_dict({"extra_features": list(names)})


def test_a_policy_file_with_extras_loads_and_decides(tmp_path):
    from policy_files import write_policy_file

    path = write_policy_file(tmp_path / "x.pt", {}, EXTRAS)
    policy = make_policy(f"rl-base={path}")
    assert policy.encoding.extra_features == TIME_EXTRAS
    decision = policy.decide(view())
    assert {launch.job_id for launch in decision.launch} <= {"a", "b"}


def test_a_file_whose_feature_list_disagrees_with_its_encoding_is_refused(tmp_path):
    import torch

    from policy_files import write_policy_file

    path = write_policy_file(tmp_path / "x.pt", {}, EXTRAS)
    doc = torch.load(path, weights_only=True)
    doc["features"] = list(FEATURES)
    torch.save(doc, path)
    with pytest.raises(DeepShareError, match="trained on other features"):
        make_policy(f"rl-base={path}")


def test_an_env_with_extras_observes_them_and_passes_the_gymnasium_checker():
    from gymnasium.utils.env_checker import check_env

    from deepshare.rl.env import DeepShareEnv

    config = {"generated_fraction": 1.0, "generated_jobs": 40, "generated_nodes": [2, 4], "max_candidates": 8,
              "extra_features": list(EXTRA_FEATURES)}
    env = DeepShareEnv(config)
    assert env.observation_space["observations"].shape == (8, len(FEATURES) + len(EXTRA_FEATURES))
    assert env.config.encoding.extra_features == EXTRA_FEATURES
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    check_env(DeepShareEnv(config), skip_render_check=True)


@pytest.mark.parametrize("change, says", [
    ({"extra_features": ["bogus"]}, "encoding: unknown extra features \\['bogus'\\]"),
    ({"anchor": ["nope", "packed"]}, "encoding: anchor order 'nope' is unknown"),
    ({"max_candidates": 1}, r"encoding: max_candidates must be an integer in 2..1024 \(wait \+ one launch at least\), got 1"),
    ({"colour": "blue"}, "encoding: .*colour"),
])
def test_a_file_with_a_bad_encoding_is_refused_in_one_line_naming_it(tmp_path, change, says):
    import torch

    from policy_files import write_policy_file

    path = write_policy_file(tmp_path / "x.pt", {})
    doc = torch.load(path, weights_only=True)
    doc["encoding"].update(change)
    doc["features"] = list(FEATURES) + list(doc["encoding"].get("extra_features", []))
    torch.save(doc, path)
    with pytest.raises(DeepShareError, match=f"policy checkpoint {path}: {says}"):
        make_policy(f"rl-base={path}")


def test_the_job_columns_say_what_the_estimate_and_the_history_say():
    """belief_left_h, history_jobs, history_spread and has_estimate on a hand-made request: a's
    group ran twice (1,000 s and 4,000 s); b has only a time limit; the wait row has zeros."""
    from deepshare.policies.posterior import expected_remaining_s

    doc = {
        "now": 100.0,
        "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 8}],
        "pending": [
            {"job_id": "a", "model": "FSDP", "gpus": 2, "submitted_at": 10.0, "group": "g"},
            {"job_id": "b", "model": "FSDP", "gpus": 4, "submitted_at": 20.0, "requested_s": 900.0},
        ],
        "history": [{"gpus": 2, "run_s": 1000.0, "group": "g"}, {"gpus": 2, "run_s": 4000.0, "group": "g"}],
    }
    v = request_to_view(PlacementRequest.model_validate(doc), default_catalog(), make_contention("profiled"))
    config = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None, extra_features=EXTRA_FEATURES[4:])
    got = table(PartialDecision(v), config)
    a, b = v.queued
    assert got[(None, None)] == (0.0, 0.0, 0.0, 0.0)
    a_row = next(value for key, value in got.items() if key[0] == "a")
    b_row = next(value for key, value in got.items() if key[0] == "b")
    spread = abs(math.log(4000.0) - math.log(1000.0)) / 2  # two runs: log-sd about their mean
    assert a_row == tuple(np.round(np.float32([hours(expected_remaining_s(a, v.history)), math.log1p(2), spread, 0.0]), 6))
    assert b_row[1:] == tuple(np.round(np.float32([math.log1p(2), spread, 1.0]), 6))  # any job: the two runs of g
    assert b_row[0] == round(np.float32(hours(expected_remaining_s(b, v.history))), 6)
    # the belief lies between what the estimate and the history say
    assert 900.0 < expected_remaining_s(b, v.history) < 2000.0
