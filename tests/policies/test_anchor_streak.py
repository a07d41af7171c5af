"""RL-hybrid's anchor streak (``HybridRules.anchor_streak``, issue 37 item 6): a choice of the
anchor's row makes up to that many of the anchor's launches without scoring them, so a decision of
thousands of launches asks the network about once per streak. On hand-checkable decisions: how
often the scorer is asked, which launches are made, when no streak runs; the rule's bounds in a
policy file and on ``export-policy``; and training, evaluation and serving deciding alike."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli, one_error_line
from policy_files import write_policy_file
from serving_cases import canonical

import deepshare.rl.env as env_module
from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.types import Decision, JobSpec, Launch, Placement
from deepshare.policies import make_policy
from deepshare.policies.checkpoint import SHIPPED, learned_policy
from deepshare.policies.encoding import ANCHOR_ROW, WAIT_INDEX, EncodingConfig, PartialDecision, encode
from deepshare.policies.learned import MAX_ANCHOR_STREAK, HybridRules, LearnedPolicy, take
from deepshare.policies.policy_card import HybridRulesCard, card_path, read_card
from deepshare.rl.env import DeepShareEnv
from deepshare.serving.engine import EngineSettings, PlacementEngine
from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import response_to_decision, view_to_request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_decision_step import SHIPPED_ENCODING, play  # noqa: E402  (the equivalence test's helpers)

POLICIES = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "policies"
TRACE = str(POLICIES.parent / "traces" / "deepshare-train-jobset0-episode0.json")
ENCODING = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=("srsf", "packed"))
NEVER = dict(min_ratio=2.0, utilisation_floor=0.0)
"""Safety-net thresholds that never fire."""


def burst() -> PartialDecision:
    """Ten 1-GPU jobs queued at once (t=1) on two free 8-GPU nodes (durations 100 s .. 1,000 s, so
    srsf launches them in order j0 .. j9) while a job holds a third node (so waiting is allowed)."""
    jobs = [JobSpec(f"j{i}", "MobileNetV3", 1, 1.0, duration_s=100.0 * (i + 1)) for i in range(10)]
    sim = Simulator(uniform(3, 8), [JobSpec("held", "FSDP", 8, 0.0, duration_s=10_000.0), *jobs],
                    make_contention("profiled"))
    assert sim.advance() is not None
    sim.apply(Decision(launch=(Launch("held", Placement(((2, 8),))),)))
    view = sim.advance()
    assert view is not None and len(view.queued) == 10 and view.free == (8, 8, 0)
    return PartialDecision(view)


class Counting:
    """A scorer that prefers ``row`` (then wait) and counts how often it is asked."""

    def __init__(self, row: int) -> None:
        self.row, self.asked = row, 0

    def __call__(self, obs: dict) -> np.ndarray:
        self.asked += 1
        scores = np.zeros(len(obs["action_mask"]), dtype=np.float32)
        scores[WAIT_INDEX] = 0.5
        scores[self.row] = 1.0
        return scores


@pytest.mark.parametrize(("streak", "asked"), [(1, 10), (2, 5), (3, 4), (4, 3), (10, 1), (MAX_ANCHOR_STREAK, 1)])
def test_a_streak_asks_the_scorer_once_per_streak_and_launches_what_asking_every_time_would(streak, asked):
    scorer = Counting(ANCHOR_ROW)
    policy = LearnedPolicy("x", scorer, ENCODING, HybridRules(**NEVER, anchor_streak=streak))
    decision = policy.decide(burst().view)
    assert scorer.asked == asked  # ceil(10 / streak): nothing is left to choose after the last launch
    assert [launch.job_id for launch in decision.launch] == [f"j{i}" for i in range(10)]
    every_time = LearnedPolicy("x", Counting(ANCHOR_ROW), ENCODING, HybridRules(**NEVER)).decide(burst().view)
    assert decision == every_time == make_policy("srsf+packed").decide(burst().view)


def test_a_step_reports_the_launches_its_streak_added():
    partial = burst()
    obs, rows = encode(partial, ENCODING)
    step = take(partial, rows, obs["action_mask"], ANCHOR_ROW, HybridRules(**NEVER, anchor_streak=4), ENCODING)
    assert step.launched == rows[ANCHOR_ROW] and step.repeated == 3 and not step.safety_net
    assert [launch.job_id for launch in step.partial.launches] == ["j0", "j1", "j2", "j3"]
    assert sum(partial.free) - sum(step.partial.free) == 4
    last = burst()  # a streak stops where the anchor has nothing left to launch
    for _ in range(8):
        obs, rows = encode(last, ENCODING)
        last = take(last, rows, obs["action_mask"], ANCHOR_ROW, HybridRules(**NEVER), ENCODING).partial
    obs, rows = encode(last, ENCODING)
    step = take(last, rows, obs["action_mask"], ANCHOR_ROW, HybridRules(**NEVER, anchor_streak=5), ENCODING)
    assert step.repeated == 1 and step.partial.count == 10


def test_no_streak_follows_another_row_a_wait_a_safety_net_launch_an_invalid_row_or_rl_base():
    partial = burst()
    obs, rows = encode(partial, ENCODING)
    mask = obs["action_mask"]
    rules = HybridRules(**NEVER, anchor_streak=4)
    other = take(partial, rows, mask, ANCHOR_ROW + 1, rules, ENCODING)
    assert other.launched == rows[ANCHOR_ROW + 1] and other.repeated == 0 and other.partial.count == 1
    assert take(partial, rows, mask, WAIT_INDEX, rules, ENCODING).launched is None  # the net never fires
    netted = take(partial, rows, mask, WAIT_INDEX, HybridRules(anchor_streak=4), ENCODING)  # utilisation 1/3: it fires
    assert netted.safety_net and netted.repeated == 0 and netted.partial.count == 1
    invalid = take(partial, rows, mask, len(mask) + 3, HybridRules(anchor_streak=4), ENCODING)
    assert invalid.invalid and invalid.repeated == 0 and invalid.partial.count == 1
    assert take(partial, rows, mask, ANCHOR_ROW, None, ENCODING).partial.count == 1  # rl-base: no rules, no streak
    assert take(partial, rows, mask, ANCHOR_ROW, rules).partial.count == 1  # no encoding given: no streak


def test_without_an_anchor_row_there_is_no_streak():
    unanchored = EncodingConfig(max_candidates=8, jobs_considered=2, anchor=None)
    scorer = Counting(ANCHOR_ROW)  # row 1 is then a generator's row, not the anchor's launch
    LearnedPolicy("x", scorer, unanchored, HybridRules(**NEVER, anchor_streak=8)).decide(burst().view)
    assert scorer.asked == 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, 2.0, True, "4", None, MAX_ANCHOR_STREAK + 1])
def test_the_rule_is_a_whole_number_of_launches_in_range(bad):
    with pytest.raises(ValueError, match="anchor_streak must be an integer"):
        HybridRules(anchor_streak=bad)


def test_the_card_and_the_rule_have_the_same_bound():
    HybridRulesCard(anchor_streak=MAX_ANCHOR_STREAK)
    with pytest.raises(ValueError):
        HybridRulesCard(anchor_streak=MAX_ANCHOR_STREAK + 1)
    with pytest.raises(ValueError):
        HybridRulesCard(anchor_streak=0)
    with pytest.raises(ValueError):
        HybridRulesCard(anchor_streak=True)


# -- in a policy file and on export ---------------------------------------------------------------


def test_a_file_carries_its_streak_and_old_files_have_none(tmp_path):
    path = write_policy_file(tmp_path / "p.pt", {"hybrid_rules": {"anchor_streak": 4}})
    assert learned_policy("rl-hybrid", path, True).hybrid == HybridRules(anchor_streak=4)
    path = write_policy_file(tmp_path / "q.pt", {"hybrid_rules": {"anchor_streak": 8.0}})  # JSON may write 8.0
    assert learned_policy("rl-hybrid", path, True).hybrid.anchor_streak == 8
    assert learned_policy("rl-hybrid", write_policy_file(tmp_path / "old.pt", {}), True).hybrid.anchor_streak == 1


@pytest.mark.parametrize("bad", [0, 2.5, "4", True, float("nan"), MAX_ANCHOR_STREAK + 1, [4], 10**400, -(10**400)])
def test_a_bad_streak_in_a_file_is_one_line_naming_the_key(tmp_path, bad):
    path = write_policy_file(tmp_path / "p.pt", {"hybrid_rules": {"anchor_streak": bad}})
    with pytest.raises(DeepShareError, match="hybrid_rules.anchor_streak: expected a whole number of launches in 1..1024"):
        learned_policy("rl-hybrid", path, True)


def test_export_sets_the_streak_and_the_card_says_so(tmp_path, capsys):
    out = tmp_path / "streak.pt"
    rc, _, err = cli(capsys, "export-policy", POLICIES / SHIPPED, "--out", out, "--kind", "hybrid",
                     "--anchor", "bsrsf+uncontended", "--hybrid-rules", "anchor_streak=4", "--teacher", "bsrsf+uncontended",
                     "--commit", "0123abc")
    assert (rc, err) == (0, ""), err
    card = read_card(card_path(out))
    assert card.rules.as_metadata() == {"hybrid_rules": {"anchor_streak": 4, "anchor": ["bsrsf", "uncontended"]}}
    assert "up to 4 of that heuristic's launches" in card.summary
    policy = make_policy(f"rl-hybrid={out}")
    assert policy.hybrid == HybridRules(anchor=("bsrsf", "uncontended"), anchor_streak=4)


@pytest.mark.parametrize("value", ["0", "2.5", "abc", "1025", "nan", "", "4x", "1e400"])
def test_a_bad_streak_flag_is_one_line_and_nothing_is_written(tmp_path, capsys, value):
    rc, stdout, err = cli(capsys, "export-policy", POLICIES / SHIPPED, "--out", tmp_path / "x.pt", "--kind", "hybrid",
                          "--hybrid-rules", f"anchor_streak={value}", "--commit", "0123abc")
    assert rc == 2 and stdout == ""
    one_error_line(err, "anchor_streak: expected a whole number of launches in 1..1024")
    assert list(tmp_path.iterdir()) == []


# -- training, evaluation and serving decide alike --------------------------------------------------


def test_env_policy_and_engine_take_identical_decisions_with_a_streak_that_runs(monkeypatch):
    """The shipped network follows its anchor often on the artifact's trace (every job queued at
    the start), so its streaks run; the env (training), the policy (evaluation) and the engine
    (serving) make the same launches."""
    made = []
    original = env_module.take

    def counted(*args, **kwargs):
        step = original(*args, **kwargs)
        made.append(step.repeated)
        return step

    monkeypatch.setattr(env_module, "take", counted)
    env = DeepShareEnv({"traces": [TRACE], "max_candidates": 10, "hybrid": True, "hybrid_anchor_streak": 3,
                        **SHIPPED_ENCODING})
    shipped = make_policy("rl-hybrid")
    policy = LearnedPolicy("x", shipped.scorer, env.config.encoding, env.config.hybrid_rules)
    decisions = []

    engine = PlacementEngine(EngineSettings(policy="srsf+packed"))
    engine.policy = policy

    def check(n, view, decision):
        decisions.append(decision)
        assert policy.decide(view).launch == decision.launch
        if n % 4 == 0:  # serving every fourth point keeps the test quick
            response = engine.place(PlacementRequest.model_validate_json(view_to_request(view).model_dump_json()))
            assert canonical(response_to_decision(response, view)) == canonical(decision)

    play(env, 0, shipped.scorer, check)
    assert sum(made) > 10 and max(made) == 2 and len(decisions) > 10


@pytest.mark.parametrize("bad", [0, 1025, 2.5, "x", True, 10**400])
def test_a_bad_streak_in_an_env_config_is_one_line_naming_the_key(bad):
    from deepshare.rl.env import EnvConfig

    with pytest.raises(DeepShareError, match="env config: hybrid_anchor_streak") as info:
        EnvConfig.from_dict({"hybrid": True, "hybrid_anchor_streak": bad})
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("values", [{"hybrid": False}, {"hybrid": True, "anchor": None}])
def test_an_env_streak_that_could_never_run_is_refused(values):
    from deepshare.rl.env import EnvConfig

    with pytest.raises(DeepShareError, match="hybrid_anchor_streak follows the anchor's row of RL-hybrid"):
        EnvConfig.from_dict({**values, "hybrid_anchor_streak": 4})
    EnvConfig.from_dict({**values, "hybrid_anchor_streak": 1})
