"""``check_card`` ties a card's information model and training record to the file's metadata, not
only its name, hash and rules: a card edited to claim `exact` or another seed is out of step."""

from __future__ import annotations

import pytest

from deepshare.policies.checkpoint import scorer_from_file
from deepshare.policies.policy_card import card_path, check_card, read_card, shipped_folder, validate_card

SHIPPED = sorted(shipped_folder().glob("*.pt"))


@pytest.mark.parametrize("weights", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_card_matches_its_files_metadata_and_encoding(weights):
    _, encoding, metadata = scorer_from_file(weights)
    assert check_card(read_card(card_path(weights)), weights, metadata, encoding) == []


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda raw: raw["information"].update(durations=["exact"]), "information.durations"),
        (lambda raw: raw["information"].update(estimate_errors=[2.0]), "information.estimate_errors"),
        (lambda raw: raw["information"].update(offer_order="las"), "information.offer_order"),
        (lambda raw: raw["training"].update(seed=99, seeds_tried=[99]), "training.seed"),
        (lambda raw: raw["training"].update(method="PPO, 9999 iterations from scratch"), "training.method"),
        (lambda raw: raw["training"].update(config="rllib_configs/other.yaml"), "training.config"),
        (lambda raw: raw["training"].update(init_from="runs/x/policy.pt"), "training.init_from"),
    ],
)
def test_a_card_edited_to_claim_another_training_is_out_of_step(edit, field):
    weights = shipped_folder() / "rl_est_ppo.pt"
    _, encoding, metadata = scorer_from_file(weights)
    raw = read_card(card_path(weights)).model_dump()
    edit(raw)
    problems = check_card(validate_card(raw, "edited"), weights, metadata, encoding)
    assert [p for p in problems if p.startswith(field + ":")], problems


def test_the_policies_listing_checks_shipped_cards_against_metadata(monkeypatch):
    """``deepshare policies`` (listing._shipped_cards) compares with the metadata too."""
    import deepshare.cli.listing as listing
    import deepshare.policies.policy_card as cards

    real = cards.read_card

    def lying(path):
        card = real(path)
        raw = card.model_dump()
        raw["information"]["durations"] = ["exact"] if raw["information"]["durations"] != ["exact"] else ["unknown"]
        return validate_card(raw, str(path))

    monkeypatch.setattr(cards, "read_card", lying)
    found = listing._shipped_cards()
    assert found and all(entry["problem"] and "information.durations" in entry["problem"] for entry in found.values())
