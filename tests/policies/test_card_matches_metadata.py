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
    found, nameless = listing._shipped_cards()
    assert found and all(entry["problem"] and "information.durations" in entry["problem"] for entry in found.values())
    assert nameless == []


def _evil_copy(folder, config="rllib_configs/a\x1b[2Jb.yaml"):
    """rl_est_ppo.pt with a control character in its metadata's config, and its card made to
    match the new weights' SHA-256 (the reviewer's construction)."""
    import hashlib

    from deepshare.policies.checkpoint import policy_file_bytes
    from deepshare.policies.policy_card import card_yaml

    weights = shipped_folder() / "rl_est_ppo.pt"
    scorer, encoding, metadata = scorer_from_file(weights)
    data = policy_file_bytes(scorer.net, encoding, {**metadata, "config": config})
    evil = folder / "evil.pt"
    evil.write_bytes(data)
    card = read_card(card_path(weights)).model_copy(
        update={"weights": "evil.pt", "weights_sha256": hashlib.sha256(data).hexdigest(), "loaded_by": []})
    card_path(evil).write_text(card_yaml(card))
    return evil


def test_metadata_no_card_may_hold_is_one_problem_line_not_a_traceback(tmp_path, capsys):
    """A control character in the file's metadata (its config) cannot go on a card: ``policies
    --card`` reports it as one problem, escaped, instead of a pydantic traceback."""
    from cli_run import cli

    evil = _evil_copy(tmp_path)
    _, encoding, metadata = scorer_from_file(evil)
    problems = check_card(read_card(card_path(evil)), evil, metadata, encoding)
    assert len(problems) == 1 and problems[0].startswith("training: the file's metadata cannot say (config: control characters")
    rc, out, err = cli(capsys, "policies", "--card", evil)
    assert (rc, err) == (1, "") and "\x1b" not in out
    assert "# OUT OF STEP: training: the file's metadata cannot say (config: control characters" in out
    assert "a\\x1b[2Jb.yaml" in out  # escaped, never the terminal's escape sequence


def test_an_encoding_no_card_may_hold_is_one_information_problem():
    weights = shipped_folder() / "rl_est_ppo.pt"
    _, _, metadata = scorer_from_file(weights)
    card = read_card(card_path(weights))
    problems = check_card(card, weights, metadata, {"extra_features": ["belief\x1b[2J"], "offer_order": None})
    assert problems == [p for p in problems if p.startswith("information")] and len(problems) == 1
    assert "information: the file's metadata cannot say (extra_features" in problems[0] and "\x1b" not in problems[0]


@pytest.mark.parametrize("teacher", ["srsf+packed", None])
def test_a_card_whose_teacher_contradicts_the_files_imitates_is_out_of_step(teacher):
    """Review: a card claiming another teacher (or none) than the heuristic the file imitated passed."""
    weights = shipped_folder() / "rl_est_imitation.pt"
    _, encoding, metadata = scorer_from_file(weights)
    assert metadata["imitates"] == "bsrsf+uncontended"
    raw = read_card(card_path(weights)).model_dump()
    raw["teacher"] = teacher
    problems = check_card(validate_card(raw, "edited"), weights, metadata, encoding)
    assert problems == [f"teacher: the card says {teacher!r}, the file's metadata imitates 'bsrsf+uncontended'"]


def test_an_expert_iteration_teacher_is_compared_as_recorded():
    """An expert-iteration file's ``imitates`` is the planner's spec with its candidates appended;
    the card's teacher (export copies it) is that, and a card dropping the candidates is out of step."""
    weights = shipped_folder() / "rl_est_imitation.pt"
    _, encoding, metadata = scorer_from_file(weights)
    recorded = "planner=4 (candidates srsf+packed,fifo+packed)"
    metadata = {**metadata, "imitates": recorded, "teacher": recorded}
    raw = read_card(card_path(weights)).model_dump()
    raw["teacher"] = recorded
    raw["training"]["method"] = f"imitation of {recorded}: behaviour cloning, 1 DAgger round(s)"  # the method names it too
    assert check_card(validate_card(raw, "c"), weights, metadata, encoding) == []
    raw["teacher"] = "planner=4"
    problems = check_card(validate_card(raw, "c"), weights, metadata, encoding)
    assert problems == [f"teacher: the card says 'planner=4', the file's metadata imitates {recorded!r}"]


@pytest.mark.parametrize(
    "teacher, needle",
    [("clever", "registered heuristic"), ("SRSF+packed", "registered heuristic"), ("rl-base", "registered heuristic"),
     ("planner=x", "planner"), ("planner=4 (candidates nope)", "nope")],
)
def test_a_cards_teacher_must_be_a_registered_heuristic_or_a_planner(teacher, needle):
    from deepshare.core.errors import DeepShareError

    raw = read_card(shipped_folder() / "rl_est_ppo.card.yaml").model_dump()
    raw["teacher"] = teacher
    with pytest.raises(DeepShareError) as caught:
        validate_card(raw, "edited")
    assert str(caught.value).startswith("edited: teacher: ") and needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_ok_line_says_what_was_checked(capsys):
    """The line after a card that matches names exactly the fields compared: not the command."""
    from cli_run import cli

    from deepshare.policies.policy_card import CHECKED

    rc, out, err = cli(capsys, "policies", "--card", "rl-base")
    assert (rc, err) == (0, "")
    assert out.rstrip("\n").splitlines()[-1] == f"# the card matches its weights: {CHECKED}"
    assert "command" not in CHECKED and "teacher" in CHECKED
