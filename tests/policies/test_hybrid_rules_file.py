"""A policy file may carry its safety-net rules (metadata ``hybrid_rules``); files without keep the defaults."""

from __future__ import annotations

import pytest

from deepshare.core.errors import DeepShareError
from policy_files import write_policy_file

from deepshare.policies.checkpoint import learned_policy
from deepshare.policies.learned import HybridRules


def policy_file(tmp_path, metadata):
    return write_policy_file(tmp_path / "policy.pt", metadata)


def test_a_file_without_rules_gets_the_defaults_and_base_gets_none(tmp_path):
    path = policy_file(tmp_path, {"name": "old"})
    assert learned_policy("rl-hybrid", path, True).hybrid == HybridRules()
    assert learned_policy("rl-base", path, False).hybrid is None


def test_the_files_rules_replace_the_defaults_they_name(tmp_path):
    path = policy_file(tmp_path, {"hybrid_rules": {"min_ratio": 1.01, "utilisation_floor": 0}})
    assert learned_policy("rl-hybrid", path, True).hybrid == HybridRules(min_ratio=1.01, utilisation_floor=0.0)
    assert learned_policy("rl-base", path, False).hybrid is None
    path = policy_file(tmp_path, {"hybrid_rules": {"anchor": ["srsf", "packed"]}})
    assert learned_policy("rl-hybrid", path, True).hybrid == HybridRules(anchor=("srsf", "packed"))


@pytest.mark.parametrize(("rules", "named"), [
    ({"min_ration": 1.0}, "unknown \\['min_ration'\\]"),
    (["min_ratio"], "expected a mapping"),
    ({"min_ratio": "abc"}, "hybrid_rules.min_ratio: expected a number >= 0, got 'abc'"),
    ({"utilisation_floor": -0.5}, "hybrid_rules.utilisation_floor: expected a number >= 0"),
    ({"min_ratio": float("nan")}, "hybrid_rules.min_ratio"),
    ({"min_ratio": True}, "hybrid_rules.min_ratio"),
    ({"min_ratio": 10**400}, "hybrid_rules.min_ratio: expected a number >= 0"),  # no float holds it: was an OverflowError
    ({"anchor": "srsf+packed"}, "hybrid_rules.anchor: expected \\[order, placement\\]"),
    ({"anchor": ["srsf"]}, "hybrid_rules.anchor: anchor must be"),
    ({"anchor": ["srsf", "tightly"]}, "hybrid_rules.anchor: anchor placement 'tightly' is unknown"),
])
def test_bad_rules_are_refused_in_one_line_naming_the_key(tmp_path, rules, named):
    path = policy_file(tmp_path, {"hybrid_rules": rules})
    with pytest.raises(DeepShareError, match=named):
        learned_policy("rl-hybrid", path, True)
    learned_policy("rl-base", path, False)  # rl-base has no safety net: the rules are not read
