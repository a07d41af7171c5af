"""A policy file may carry its safety-net rules (metadata ``hybrid_rules``); files without keep the defaults."""

from __future__ import annotations

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.policies.checkpoint import export_scorer, learned_policy
from deepshare.policies.encoding import FEATURES, EncodingConfig
from deepshare.policies.learned import HybridRules
from deepshare.policies.scorer_net import CandidateScorer


def policy_file(tmp_path, metadata):
    path = tmp_path / "policy.pt"
    export_scorer(CandidateScorer(len(FEATURES), 8), EncodingConfig(), path, metadata)
    return path


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


@pytest.mark.parametrize("rules", [{"min_ration": 1.0}, ["min_ratio"]])
def test_unknown_rules_are_refused_in_one_line(tmp_path, rules):
    path = policy_file(tmp_path, {"hybrid_rules": rules})
    with pytest.raises(DeepShareError, match="hybrid_rules"):
        learned_policy("rl-hybrid", path, True)
