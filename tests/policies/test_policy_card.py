"""Policy cards (issue 37, item 4): every shipped policy file says what it ships, next to its
weights; ``deepshare export-policy`` writes a file and its card together; ``deepshare policies``
shows them; a card is user input; files without a card still load."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from cli_run import cli, one_error_line
from policy_files import write_policy_file

from deepshare.core.contention import make_contention
from deepshare.core.errors import DeepShareError
from deepshare.core.simulator import Simulator
from deepshare.core.topology import uniform
from deepshare.core.traces import generate
from deepshare.policies import make_policy, policy_info, policy_names
from deepshare.policies.checkpoint import SHIPPED, SHIPPED_BASE, SHIPPED_PREEMPT, scorer_from_file
from deepshare.policies.policy_card import (
    CARD_SUFFIX, RULE_KEYS, PolicyCard, card_of, card_path, card_yaml, check_card, parse_card, read_card,
)

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "deepshare" / "data" / "policies"
SHIPPED_FILES = sorted(POLICIES.glob("*.pt"))
LOADED_JSON = ROOT / "docs" / "results" / "suite" / "loaded.json"
DEFAULT_FILES = {"rl-base": SHIPPED_BASE, "rl-hybrid": SHIPPED, "rl-hybrid-preempt": SHIPPED_PREEMPT}
"""What each learned name loads by default (checkpoint.py's constants)."""

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def metadata_of(path: Path) -> dict:
    return scorer_from_file(path)[2]


# -- the shipped files ------------------------------------------------------------------------------
def test_there_are_shipped_files_and_every_card_has_its_file() -> None:
    assert len(SHIPPED_FILES) >= 7
    for card_file in POLICIES.glob("*" + CARD_SUFFIX):
        assert card_file.with_name(read_card(card_file).weights).is_file(), card_file


@pytest.mark.parametrize("weights", SHIPPED_FILES, ids=lambda p: p.name)
def test_every_shipped_file_has_a_valid_card_that_matches_it(weights: Path) -> None:
    card = card_of(weights)
    assert card is not None, f"{weights.name} has no card ({card_path(weights).name})"
    assert card.weights == weights.name
    metadata = metadata_of(weights)
    assert check_card(card, weights, metadata) == []
    # the card's rules are exactly the file's rule keys
    assert card.rules.as_metadata() == {k: metadata[k] for k in RULE_KEYS if k in metadata}
    for name in card.loaded_by:
        assert not policy_info(name).heuristic and name in policy_names()
    assert card.training.command and card.information.durations
    assert card.figures or card.figures_note
    assert card.commit or card.commit_note


@pytest.mark.parametrize("name", sorted(DEFAULT_FILES))
def test_each_learned_name_has_one_card_and_it_is_of_the_file_it_loads(name: str) -> None:
    cards = [read_card(p) for p in POLICIES.glob("*" + CARD_SUFFIX)]
    mine = [c for c in cards if name in c.loaded_by]
    assert len(mine) == 1, name
    assert mine[0].weights == DEFAULT_FILES[name]
    assert Path(make_policy(name).metadata["checkpoint"]).name == mine[0].weights
    expected_kind = {"rl-base": "network", "rl-hybrid": "hybrid", "rl-hybrid-preempt": "hybrid-preempt"}[name]
    assert mine[0].kind == expected_kind


def test_the_shipped_cards_say_what_the_readme_says() -> None:
    ppo, preempt = read_card(card_path(POLICIES / SHIPPED)), read_card(card_path(POLICIES / SHIPPED_PREEMPT))
    assert ppo.teacher == "bsrsf+uncontended" and ppo.training.config == "rllib_configs/rl_est_ppo.yaml"
    assert ppo.training.seeds_tried == [0, 1, 2] and ppo.anchor() == "bsrsf+uncontended"
    assert preempt.rules.preemptive == "bsrsf+uncontended+preempt" and preempt.safety_net_off
    assert "estimated" in ppo.information.durations and "unknown" in ppo.information.durations
    loaded = json.loads(LOADED_JSON.read_text())["summary"]["rl-hybrid-preempt"]
    assert preempt.figures["loaded"].geomean_avg_jct_ratio == round(loaded["geomean_avg_jct_ratio"], 4)
    old = read_card(POLICIES / "rl_base.pt".replace(".pt", CARD_SUFFIX))
    assert old.information.durations == ["exact"] and old.teacher is None and old.loaded_by == []


def test_cards_are_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["deepshare.data"]
    assert "policies/*.card.yaml" in data and "policies/*.pt" in data


def test_the_policies_readme_makes_files_with_the_export_not_torch_save() -> None:
    text = (POLICIES / "README.md").read_text()
    assert "torch.save" not in text
    assert text.count("deepshare export-policy") >= 3


# -- the card as data -------------------------------------------------------------------------------
def test_a_card_round_trips_through_its_yaml() -> None:
    for card_file in POLICIES.glob("*" + CARD_SUFFIX):
        card = read_card(card_file)
        again = parse_card(card_yaml(card), "again")
        assert again == card
        assert card_yaml(again) == card_yaml(card)


def _card_text(tmp_path: Path, edit) -> Path:
    import yaml

    doc = yaml.safe_load((POLICIES / SHIPPED.replace(".pt", CARD_SUFFIX)).read_text())
    edit(doc)
    path = tmp_path / "bad.card.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    "edit, needles",
    [
        (lambda d: d.pop("teacher"), ("teacher", "Field required")),
        (lambda d: d["figures"]["loaded"].update(cells="many"), ("figures.loaded.cells",)),
        (lambda d: d.update(colour="red"), ("colour", "Extra inputs are not permitted")),
        (lambda d: d["training"].update(seed="zero"), ("training.seed",)),
        (lambda d: d.update(card=2), ("card", "expected card format 1")),
        (lambda d: d.update(kind="clever"), ("kind",)),
        (lambda d: d.update(weights_sha256="abc"), ("weights_sha256",)),
        (lambda d: d.update(commit=None, commit_note=None), ("commit_note", "required when commit is null")),
        (lambda d: d.update(figures={}, figures_note=None), ("figures_note",)),
        (lambda d: d["rules"].update(preemptive="srsf+packed"), ("rules.preemptive",)),
        (lambda d: d["rules"]["hybrid_rules"].update(anchor=["srsf", "nowhere"]), ("rules.hybrid_rules.anchor", "nowhere")),
        (lambda d: d["rules"]["hybrid_rules"].update(min_ratio=-1), ("rules.hybrid_rules.min_ratio",)),
        (lambda d: d.update(kind="network"), ("rules", "network-alone")),
        (lambda d: d.update(loaded_by=["rl-base"]), ("loaded_by", "rl-base")),
        (lambda d: d.update(summary="network \u202eenilno"), ("summary", "control characters", "\\u202e")),
        (lambda d: d.update(teacher="srsf\u2028commit: 0"), ("teacher", "control characters", "\\u2028")),
        (lambda d: d["training"].update(seed="0"), ("training.seed", "integer")),
        (lambda d: d.update(summary=b"network alone"), ("summary", "string")),
        (lambda d: d["figures"]["loaded"].update(cells_won=9, cells=8), ("figures.loaded", "9 cells won of 8")),
        (lambda d: d.update(card=True), ("card: expected card format 1, got true",)),  # a Literal took it as 1
        (lambda d: d.update(card=1.0), ("card: expected card format 1, got 1.0",)),
        (lambda d: d.update(card="1"), ("card: expected card format 1, got '1'",)),
        (lambda d: d.update(teacher="clever"), ("teacher", "registered heuristic")),
    ],
    ids=["missing", "wrong-type", "unknown-key", "wrong-type-nested", "format", "kind", "sha", "commit-note",
         "figures-note", "preemptive", "anchor", "negative", "kind-vs-rules", "kind-vs-loader", "bidi",
         "line-separator", "string-seed", "binary", "won-more-than-cells", "format-true", "format-float",
         "format-text", "teacher-unregistered"],
)
def test_a_bad_card_is_one_line_naming_the_file_and_the_field(tmp_path: Path, capsys, edit, needles) -> None:
    path = _card_text(tmp_path, edit)
    with pytest.raises(DeepShareError) as exc:
        read_card(path)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for needle in needles:
        assert needle in message, (needle, message)
    rc, out, err = cli(capsys, "policies", "--card", path)
    assert rc == 2 and out == ""
    one_error_line(err, str(path), needles[0])


@pytest.mark.parametrize(
    "teacher",
    ["cardmod_marker:x", "planner=4 (candidates srsf+packed,cardmod_marker:x)", "some-entry-point",
     "planner=4 (candidates some-entry-point)"],
    ids=["teacher-import", "candidate-import", "teacher-plugin", "candidate-plugin"],
)
def test_reading_a_card_imports_nothing(tmp_path: Path, capsys, monkeypatch, teacher) -> None:
    """Review: a card's teacher (or a candidate of its planner) ``module:Attr`` imported that module
    while the card was read: ``policies --card`` on a card handed over with a ``cardmod.py`` beside
    it ran the module. A name that is not the package's own is refused unloaded, plugins' entry
    points included."""
    import deepshare.policies.plugins as plugins

    marker = tmp_path / "IMPORTED"
    (tmp_path / "cardmod_marker.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nx = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    looked_up = []
    monkeypatch.setattr(plugins, "installed", lambda *a, **k: looked_up.append(a) or {})
    path = _card_text(tmp_path, lambda d: d.update(teacher=teacher))
    with pytest.raises(DeepShareError) as exc:
        read_card(path)
    assert "\n" not in str(exc.value) and "teacher" in str(exc.value)
    rc, out, err = cli(capsys, "policies", "--card", path)
    assert rc == 2 and out == ""
    one_error_line(err, str(path), "teacher")
    assert not marker.exists() and looked_up == [] and "cardmod_marker" not in sys.modules
    # the CLI's own --teacher-candidates never took a plugin (none is a heuristic): refused unloaded too
    from deepshare.policies.teacher_spec import parse_teacher

    with pytest.raises(DeepShareError, match="--teacher-candidates: .* is not a registered heuristic"):
        parse_teacher("planner=2", "srsf+packed,cardmod_marker:x")
    assert not marker.exists() and looked_up == []


def test_a_card_that_is_not_a_mapping_or_not_yaml_is_one_line(tmp_path: Path) -> None:
    for text in ("- a list\n", "card: [unclosed\n"):
        path = tmp_path / "x.card.yaml"
        path.write_text(text)
        with pytest.raises(DeepShareError) as exc:
            read_card(path)
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)


# -- export-policy ----------------------------------------------------------------------------------
PREEMPT_FLAGS = ("--kind", "hybrid-preempt", "--preemptive", "bsrsf+uncontended+preempt",
                 "--hybrid-rules", "min_ratio=1.01,utilisation_floor=0,anchor_streak=4")


def _simulate(policy):
    jobs = generate(40, load=1.3, total_gpus=32, duration_sigma=1.0, seed=1).jobs
    return Simulator(uniform(4, 8), jobs, make_contention("profiled")).run(policy).to_dict()


def test_export_writes_the_weights_and_the_card_and_decides_as_the_shipped_file(tmp_path: Path, capsys) -> None:
    """rl_est_hybrid_preempt.pt is rl_est_imitation.pt's network with rules: the export of the one
    with those rules as flags is that file, and decides as it does."""
    out = tmp_path / "preempt.pt"
    rc, stdout, err = cli(capsys, "export-policy", POLICIES / SHIPPED_BASE, "--out", out, *PREEMPT_FLAGS,
                          "--figures-of", "rl-hybrid-preempt", "--suite-figures", LOADED_JSON, "--commit", "0123abc")
    assert (rc, err) == (0, ""), err  # not --loaded-by: rl-hybrid-preempt loads the shipped file, not this one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preempt.card.yaml", "preempt.pt"]  # no temporary left
    assert f"wrote {out}" in stdout and "preemption (bsrsf+uncontended+preempt)" in stdout
    card = card_of(out)
    assert card is not None and check_card(card, out, metadata_of(out)) == []
    assert card.kind == "hybrid-preempt" and card.commit == "0123abc" and card.teacher == "bsrsf+uncontended"
    assert card.figures["loaded"].cells == 24 and card.training.config == "rllib_configs/rl_est_imitate.yaml"

    exported, source = torch.load(out, weights_only=True), torch.load(POLICIES / SHIPPED_PREEMPT, weights_only=True)
    assert exported["metadata"] == source["metadata"]  # the rules the flags give, and nothing else
    assert exported["encoding"] == source["encoding"] and exported["hidden"] == source["hidden"]
    assert all(torch.equal(exported["state_dict"][k], v) for k, v in source["state_dict"].items())
    ours = make_policy(f"rl-hybrid-preempt={out}")
    theirs = make_policy(f"rl-hybrid-preempt={POLICIES / SHIPPED_PREEMPT}")
    assert (ours.min_gain, ours.min_pressure, ours.learned.hybrid) == (theirs.min_gain, theirs.min_pressure, theirs.learned.hybrid)
    assert _simulate(ours) == _simulate(theirs)


def test_export_as_hybrid_keeps_the_source_decisions_with_the_same_rules(tmp_path: Path, capsys) -> None:
    out = tmp_path / "hybrid.pt"
    rc, _, err = cli(capsys, "export-policy", POLICIES / SHIPPED, "--out", out, "--kind", "hybrid",
                     "--teacher", "bsrsf+uncontended", "--seeds-tried", "0,1,2", "--commit", "0123abc")
    assert (rc, err) == (0, ""), err
    card = read_card(card_path(out))
    assert card.rules.as_metadata() == {"hybrid_rules": {"anchor": ["bsrsf", "uncontended"], "anchor_streak": 4}}
    assert card.training.seeds_tried == [0, 1, 2] and card.training.init_from == "runs/est_imitate/policy.pt"
    assert card.figures == {} and "none measured" in (card.figures_note or "")
    assert _simulate(make_policy(f"rl-hybrid={out}")) == _simulate(make_policy(f"rl-hybrid={POLICIES / SHIPPED}"))


def test_export_records_the_checkout_commit_or_says_why_not(tmp_path: Path, capsys, monkeypatch) -> None:
    from deepshare.experiments import provenance

    source = write_policy_file(tmp_path / "mine.pt", {"config": "c.yaml", "seed": 3, "iterations": 2})
    monkeypatch.setattr(provenance, "commit", lambda: {"sha": "f" * 40, "dirty": True})
    rc, _, err = cli(capsys, "export-policy", source, "--out", tmp_path / "a.pt", "--kind", "network")
    assert (rc, err) == (0, ""), err
    card = read_card(tmp_path / "a.card.yaml")
    assert card.commit == "f" * 40 and card.commit_dirty and card.teacher is None
    assert card.training.seed == 3 and card.training.command.startswith("deepshare train c.yaml")
    monkeypatch.setattr(provenance, "commit", lambda: None)
    rc, _, err = cli(capsys, "export-policy", source, "--out", tmp_path / "b.pt", "--kind", "network")
    assert (rc, err) == (0, ""), err
    card = read_card(tmp_path / "b.card.yaml")
    assert card.commit is None and "no commit recorded" in (card.commit_note or "")


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--hybrid-rules", "min_ratio"), "--hybrid-rules"),
        (("--hybrid-rules", "min_ratio=abc"), "--hybrid-rules"),
        (("--hybrid-rules", "speed=1"), "--hybrid-rules"),
        (("--hybrid-rules", "min_ratio=-1"), "--hybrid-rules"),
        (("--hybrid-rules", "min_ratio=nan"), "--hybrid-rules"),
        (("--preempt-rules", "min_gain=1,min_gain=2"), "--preempt-rules"),
        (("--anchor", "srsf+nowhere"), "--anchor"),
        (("--preemptive", "srsf+packed"), "--preemptive"),
        (("--teacher", "clever"), "--teacher"),
        (("--seeds-tried", "0,x"), "--seeds-tried"),
        (("--commit", "HEAD"), "--commit"),
        (("--loaded-by", "srsf+packed"), "--loaded-by"),
        (("--suite-figures", "nowhere.json"), "nowhere.json"),
        (("--suite-figures", str(LOADED_JSON), "--figures-of", "rl-nothing"), "rl-nothing"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_a_bad_flag_is_one_line_naming_it_and_nothing_is_written(tmp_path: Path, capsys, args, needle) -> None:
    out = tmp_path / "out.pt"
    rc, stdout, err = cli(capsys, "export-policy", POLICIES / SHIPPED_BASE, "--out", out, "--kind", "hybrid",
                          "--commit", "0123abc", *args)
    assert rc == 2 and stdout == ""
    one_error_line(err, needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "source, args, needle",
    [
        ("missing.pt", ("--kind", "network"), "file not found"),
        (SHIPPED, ("--kind", "network"), "--drop-rules"),  # rl-base would ignore its rules
        (SHIPPED_BASE, ("--kind", "hybrid-preempt"), "--preemptive"),  # names no heuristic to defer to
        (SHIPPED_PREEMPT, ("--kind", "hybrid"), "--kind hybrid"),  # carries preemptive
        (SHIPPED, ("--kind", "hybrid"), "--teacher"),  # started from another file: its teacher must be named
        # an imitation's teacher is what it imitated: the card would be out of step with its own file
        (SHIPPED_BASE, ("--kind", "network", "--teacher", "srsf+packed"), "imitated bsrsf+uncontended"),
        (SHIPPED_BASE, ("--kind", "network", "--teacher", "none"), "imitated bsrsf+uncontended"),
    ],
    ids=["nonexistent-source", "network-with-rules", "preempt-without-heuristic", "hybrid-with-preemptive", "teacher",
         "teacher-not-imitated", "teacher-none-of-an-imitation"],
)
def test_an_export_that_cannot_mean_what_it_says_is_refused(tmp_path: Path, capsys, source, args, needle) -> None:
    src = tmp_path / "missing.pt" if source == "missing.pt" else POLICIES / source
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc, stdout, err = cli(capsys, "export-policy", src, "--out", out_dir / "x.pt", "--commit", "0123abc", *args)
    assert rc == 2 and stdout == ""
    one_error_line(err, needle)
    assert list(out_dir.iterdir()) == []


def test_an_unregistered_imitates_is_named_as_the_sources_metadata(tmp_path: Path, capsys) -> None:
    """Review: a source whose metadata ``imitates`` is no registered heuristic was refused as the
    output card's ``teacher`` field, a file and a field the user never wrote."""
    d = torch.load(POLICIES / SHIPPED_BASE, weights_only=True)
    d["metadata"]["imitates"] = "rl-base"
    source = tmp_path / "src" / "bad.pt"
    source.parent.mkdir()
    torch.save(d, source)
    rc, out, err = cli(capsys, "export-policy", source, "--out", tmp_path / "out.pt", "--kind", "network",
                       "--commit", "0123abc")
    assert rc == 2 and out == ""
    line = one_error_line(err, f"{source}: metadata imitates:", "'rl-base'")
    assert "card.yaml" not in line and "teacher:" not in line
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


def test_export_refuses_its_own_input_and_a_name_without_pt(tmp_path: Path, capsys) -> None:
    src = tmp_path / "p.pt"
    shutil.copy(POLICIES / SHIPPED_BASE, src)
    rc, _, err = cli(capsys, "export-policy", src, "--out", src, "--kind", "network", "--commit", "0123abc")
    assert rc == 2
    one_error_line(err, "--out", "input")
    rc, _, err = cli(capsys, "export-policy", src, "--out", tmp_path / "p.card", "--kind", "network")
    assert rc == 2
    one_error_line(err, "--out", ".pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.pt"]


def test_drop_rules_exports_a_network_alone(tmp_path: Path, capsys) -> None:
    out = tmp_path / "alone.pt"
    rc, _, err = cli(capsys, "export-policy", POLICIES / SHIPPED_PREEMPT, "--out", out, "--kind", "network",
                     "--drop-rules", "--commit", "0123abc")
    assert (rc, err) == (0, ""), err
    assert not any(k in metadata_of(out) for k in RULE_KEYS)
    assert read_card(card_path(out)).what() == "the network alone"


# -- deepshare policies -----------------------------------------------------------------------------
def test_policies_shows_the_card_facts_of_each_learned_policy(capsys) -> None:
    rc, out, err = cli(capsys, "policies")
    assert (rc, err) == (0, "")
    flat = " ".join(out.replace("│", " ").split())
    for name, weights in DEFAULT_FILES.items():
        card = read_card(card_path(POLICIES / weights))
        assert f"ships {weights}:" in flat
        assert f"deepshare policies --card {name}" in flat
        assert f"teacher {card.teacher}" in flat and "commit not recorded" in flat
    assert "network + safety net off (its rules never fire) + preemption (bsrsf+uncontended+preempt)" in flat
    headline = read_card(card_path(POLICIES / SHIPPED_PREEMPT)).figures["loaded"].geomean_avg_jct_ratio
    assert f"loaded: {headline:.3f}x the best heuristic" in flat
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["rl-hybrid"]["card"]["kind"] == "hybrid" and listed["rl-hybrid"]["card"]["weights"] == SHIPPED
    assert listed["rl-base"]["card"]["teacher"] == "bsrsf+uncontended" and listed["rl-base"]["card"]["problem"] is None
    assert listed["las+consolidated"]["card"] is None


def test_policies_card_shows_a_whole_card_checked_against_its_weights(capsys, tmp_path: Path) -> None:
    rc, out, err = cli(capsys, "policies", "--card", "rl-hybrid")
    assert (rc, err) == (0, "")
    assert "kind: hybrid\n" in out and "weights: rl_est_ppo.pt" in out and "matches its weights" in out
    assert parse_card(out, "printed") == read_card(card_path(POLICIES / SHIPPED))  # the printout is the card
    rc, out, err = cli(capsys, "policies", "--card", "rl-base", "--json", "-")
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    assert doc["card"]["weights"] == SHIPPED_BASE and doc["problems"] == []
    # a weights file edited without its card (the one-line torch.save edit) is found out
    edited = tmp_path / "rl_est_ppo.pt"
    shutil.copy(card_path(POLICIES / SHIPPED), card_path(edited))
    d = torch.load(POLICIES / SHIPPED, weights_only=True)
    d["metadata"]["hybrid_rules"] = {"min_ratio": 0.5}
    torch.save(d, edited)
    rc, out, err = cli(capsys, "policies", "--card", edited)
    assert (rc, err) == (1, "")  # out of step: a failed check, the card still printed
    assert "OUT OF STEP" in out and "weights_sha256" in out and "rules" in out
    rc, out, err = cli(capsys, "policies", "--card", edited, "--json", "-")
    assert (rc, err) == (1, "")
    assert [p.split(":")[0] for p in json.loads(out)["problems"]] == ["weights_sha256", "rules"]


def test_a_heuristic_or_unknown_name_has_no_card(capsys) -> None:
    rc, _, err = cli(capsys, "policies", "--card", "srsf+packed")
    assert rc == 2
    one_error_line(err, "srsf+packed", "heuristic")
    rc, _, err = cli(capsys, "policies", "--card", "no-such-policy")
    assert rc == 2
    one_error_line(err, "no-such-policy")


# -- files without a card ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rl_base.pt", "rl_hybrid_preempt.pt"])
def test_old_checkpoints_without_cards_still_load(tmp_path: Path, capsys, name: str) -> None:
    copy = tmp_path / name
    shutil.copy(POLICIES / name, copy)
    assert card_of(copy) is None
    loader = "rl-hybrid-preempt" if "preempt" in name else "rl-hybrid"
    policy = make_policy(f"{loader}={copy}")
    assert policy.metadata["checkpoint"] == str(copy)
    rc, _, err = cli(capsys, "policies", "--card", f"{loader}={copy}")
    assert rc == 2
    one_error_line(err, "no card")


def test_a_users_file_without_metadata_rules_exports_and_loads(tmp_path: Path, capsys) -> None:
    source = write_policy_file(tmp_path / "mine.pt", {})
    flags = ("--kind", "hybrid", "--hybrid-rules", "min_ratio=0.8", "--commit", "0123abc")
    rc, _, err = cli(capsys, "export-policy", source, "--out", tmp_path / "mine2.pt", *flags)
    assert rc == 2  # no config in its metadata: no command to rebuild, the exporter gives it
    one_error_line(err, "metadata config", "--training-command")
    rc, _, err = cli(capsys, "export-policy", source, "--out", tmp_path / "mine2.pt", *flags,
                     "--training-command", "python my_training.py")
    assert (rc, err) == (0, ""), err
    card = read_card(tmp_path / "mine2.card.yaml")
    assert card.training.command == "python my_training.py"
    assert card.rules.as_metadata() == {"hybrid_rules": {"min_ratio": 0.8}}
    assert card.information.durations == ["exact"] and card.information.note  # no env: predates the model
    assert make_policy(f"rl-hybrid={tmp_path / 'mine2.pt'}").hybrid.min_ratio == 0.8
    assert isinstance(card, PolicyCard)


def test_suite_figures_are_taken_only_for_this_file(tmp_path: Path, capsys) -> None:
    """A bare registered name in a suite measured whatever file it loaded then: its figures go on a
    card only when the exporter says so (--loaded-by, --figures-of); a NAME=PATH entry naming the
    source is this file's."""
    src = tmp_path / "mine.pt"
    shutil.copy(POLICIES / SHIPPED_BASE, src)
    doc = json.loads(LOADED_JSON.read_text())
    results = tmp_path / "loaded.json"
    results.write_text(json.dumps(doc))
    rc, _, err = cli(capsys, "export-policy", src, "--out", tmp_path / "a.pt", "--kind", "network",
                     "--commit", "0123abc", "--suite-figures", results)
    assert rc == 2
    one_error_line(err, "--figures-of")
    doc["summary"][f"rl-base={src}"] = doc["summary"].pop("rl-base")
    results.write_text(json.dumps(doc))
    rc, _, err = cli(capsys, "export-policy", src, "--out", tmp_path / "b.pt", "--kind", "network",
                     "--commit", "0123abc", "--suite-figures", results)
    assert (rc, err) == (0, ""), err
    figures = read_card(tmp_path / "b.card.yaml").figures["loaded"]
    assert figures.geomean_avg_jct_ratio == round(doc["summary"][f"rl-base={src}"]["geomean_avg_jct_ratio"], 4)
    assert figures.source == str(results)
    assert doc["provenance"]["commit"]["sha"][:12] in figures.measured


# -- broken shipped files and plugins ---------------------------------------------------------------
@pytest.fixture
def shipped_copy(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the shipped policies folder that ``deepshare policies`` reads instead."""
    from deepshare.policies import policy_card

    folder = tmp_path / "policies"
    shutil.copytree(POLICIES, folder)
    monkeypatch.setattr(policy_card, "shipped_folder", lambda: folder)
    return folder


def test_an_unreadable_shipped_card_is_listed_with_its_problem_and_refused_by_card(shipped_copy: Path, capsys) -> None:
    card = card_path(shipped_copy / SHIPPED)
    card.write_text(card.read_text().replace("kind: hybrid", "kind: clever"))
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    listed = {p["name"]: p for p in json.loads(out)}
    broken = listed["rl-hybrid"]["card"]
    assert broken["card"] == card.name and "kind" in broken["problem"] and "unreadable card" in broken["facts"]
    assert listed["rl-base"]["card"]["problem"] is None  # the other cards still read
    rc, out, err = cli(capsys, "policies")
    assert rc == 0 and "unreadable card" in " ".join(out.replace("│", " ").split())
    rc, out, err = cli(capsys, "policies", "--card", "rl-hybrid")
    assert rc == 2 and out == ""
    one_error_line(err, card.name, "kind")


def test_a_card_that_is_not_yaml_still_names_nothing_and_breaks_nothing(shipped_copy: Path, capsys) -> None:
    """Review: such a card vanished from the listing while ``--card`` pointed at the listing for
    its problem; now the listing says it after the table (a warning beside the JSON) and ``--card``
    gives the YAML error itself."""
    card = card_path(shipped_copy / SHIPPED)
    card.write_text("card: [unclosed\n")
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert rc == 0
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["rl-hybrid"]["card"] is None  # no name could be read from it: nothing to attach it to
    assert listed["rl-base"]["card"]["problem"] is None  # the other cards still read
    warning = err.strip("\n").splitlines()
    assert len(warning) == 1 and warning[0].startswith("deepshare: warning: shipped card rl_est_ppo.card.yaml cannot be read")
    assert "not valid YAML (line 2" in warning[0]
    rc, out, err = cli(capsys, "policies")
    assert (rc, err) == (0, "")
    last = out.strip("\n").splitlines()[-1]
    assert last.startswith(f"shipped card {card.name} cannot be read, and no policy name can be read from it: {card}: ")
    assert "not valid YAML (line 2" in last
    rc, _, err = cli(capsys, "policies", "--card", "rl-hybrid")
    assert rc == 2
    line = one_error_line(err, "rl-hybrid", "no readable shipped card names it", f"{card}: not valid YAML (line 2")
    assert "`deepshare policies` shows" not in line
    rc, _, err = cli(capsys, "policies", "--card", "las+consolidated")
    assert rc == 2
    one_error_line(err, "a heuristic: it has no policy file")


def test_a_shipped_card_whose_weights_are_missing_is_out_of_step(shipped_copy: Path, capsys) -> None:
    (shipped_copy / SHIPPED_BASE).unlink()
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    card = {p["name"]: p for p in json.loads(out)}["rl-base"]["card"]
    assert card["problem"] == f"weights: {SHIPPED_BASE} not found"
    assert f"[card out of step: weights: {SHIPPED_BASE} not found]" in card["facts"]
    rc, out, err = cli(capsys, "policies", "--card", card_path(shipped_copy / SHIPPED_BASE))  # the card file itself
    assert (rc, err) == (1, "")
    assert f"OUT OF STEP: {SHIPPED_BASE} not found beside the card" in out
    assert parse_card(out, "printed") == read_card(card_path(POLICIES / SHIPPED_BASE))


def test_a_plugin_that_does_not_load_is_listed_not_fatal(capsys, monkeypatch) -> None:
    import deepshare.policies as policies

    real_names, real_info = policies.policy_names, policies.policy_info

    def info(name: str):
        if name == "broken-plugin":
            raise DeepShareError("entry point broken-plugin: No module named 'gone'")
        return real_info(name)

    monkeypatch.setattr(policies, "policy_names", lambda: [*real_names(), "broken-plugin"])
    monkeypatch.setattr(policies, "policy_info", info)
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["broken-plugin"]["description"] == "cannot load: entry point broken-plugin: No module named 'gone'"
    assert listed["broken-plugin"]["heuristic"] is False and listed["rl-base"]["card"] is not None


def test_an_expert_iteration_card_names_its_teacher_in_the_training_command() -> None:
    import shlex

    from deepshare.cli import build_parser
    from deepshare.policies.policy_card import training_of

    metadata = {"trainer": "imitation: expert iteration", "imitates": "planner=4 (candidates srsf+packed,fifo+packed)",
                "teacher": "planner=4 (candidates srsf+packed,fifo+packed)",
                "teacher_config": {"futures": 4, "candidates": ["srsf+packed", "fifo+packed"]},
                "dagger_rounds": 2, "episodes": 16, "fit": {"epochs": 30, "seed": 0}, "config": "rllib_configs/x.yaml"}
    command = training_of(metadata).command
    assert command == ("deepshare imitate rllib_configs/x.yaml --episodes 16 --dagger-rounds 2 --epochs 30 --seed 0 "
                       "--teacher planner=4 --teacher-candidates srsf+packed,fifo+packed")
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.teacher, args.teacher_candidates) == ("planner=4", "srsf+packed,fifo+packed")
    plain = training_of({**metadata, "teacher": "planner=2", "teacher_config": {"futures": 2, "candidates": None}}).command
    assert plain.endswith("--seed 0 --teacher planner=2")
    # a run's teacher config names its horizon: the rebuilt spec says it (the spec's default changed)
    hour = training_of({**metadata, "teacher": "planner=2",
                        "teacher_config": {"futures": 2, "candidates": None, "horizon_s": 3600.0, "arrivals": True}})
    assert hour.command.endswith("--teacher planner=2:::3600")
    end = training_of({**metadata, "teacher": "planner",
                       "teacher_config": {"futures": 8, "candidates": None, "horizon_s": 365 * 86400.0, "arrivals": False}})
    assert end.command.endswith("--teacher planner=:::end")
    named = training_of({**metadata, "teacher": "planner=2::link:900",
                         "teacher_config": {"futures": 2, "candidates": None, "horizon_s": 900.0, "arrivals": True}})
    assert named.command.endswith("--teacher planner=2::link:900")
    cloning = {k: v for k, v in metadata.items() if k not in ("teacher", "teacher_config")}
    assert "--teacher" not in training_of(cloning).command  # behaviour cloning of the anchor has no teacher flag


def test_suite_figures_name_the_commit_a_moved_checkout_was_at():
    """Second read: the card wrote "(with uncommitted changes)" alone where the suite's JSON says
    the checkout had moved to another commit when it was written."""
    from deepshare.policies.policy_card import figures_from_suite

    doc = {"suite": {"name": "quick"}, "summary": {"rl-hybrid": {"geomean_avg_jct_ratio": 1.01}},
           "provenance": {"date": "2026-12-07T05:00:00+00:00", "deepshare": "0.1.0",
                          "commit": {"sha": "a" * 40, "dirty": True, "sha_at_write": "b" * 40}}}
    _, figures = figures_from_suite(doc, "rl-hybrid", "quick.json")
    assert figures.measured.endswith("at aaaaaaaaaaaa (with uncommitted changes; the checkout was at bbbbbbbbbbbb when written)")


_ROW = {"a": {"geomean_avg_jct_ratio": 1.0}}


@pytest.mark.parametrize(
    "doc, needles",
    [
        ({"suite": {"name": ["x"]}, "summary": _ROW}, ("suite.name", "['x']")),
        ({"suite": {"name": None}, "summary": _ROW}, ("suite.name", "None")),
        ({"suite": {"name": " "}, "summary": _ROW}, ("suite.name",)),
        ({"suite": {"name": "x"}, "summary": _ROW, "summary_by_durations": [1]}, ("summary_by_durations", "a mapping")),
        ({"suite": {"name": "x"}, "summary": _ROW, "summary_by_durations": {"exact": [1]}},
         ("summary_by_durations.exact", "a mapping")),
        ({"suite": {"name": "x"}, "summary": _ROW, "summary_by_durations": {"exact": {"a": 3}}},
         ("summary_by_durations.exact.a", "a mapping")),
        ({"suite": {"name": "x"}, "summary": _ROW, "provenance": []}, ("provenance:", "a mapping")),
        ({"suite": {"name": "x"}, "summary": _ROW, "provenance": {"commit": "abc"}}, ("provenance.commit", "a mapping")),
        ({"suite": {"name": "x"}, "summary": {"a": [1]}}, ("summary.a", "a mapping")),
        ({"suite": {"name": "x"}, "summary": {"a": {"geomean_avg_jct_ratio": "nan"}}},
         ("summary.a", "geomean_avg_jct_ratio: Input should be a finite number")),
        ({"suite": {"name": "x"}, "summary": {"a": {"geomean_avg_jct_ratio": 1.0, "cells_won": 5, "cells": 2}}},
         ("summary.a", "cells_won: 5 cells won of 2 cells")),
    ],
    ids=["name-list", "name-null", "name-blank", "by-durations-list", "by-durations-row-list", "by-durations-entry",
         "provenance-list", "commit-string", "row-list", "nan", "won-of-cells"],
)
def test_badly_shaped_suite_figures_are_one_line_naming_the_key(tmp_path: Path, capsys, doc, needles) -> None:
    """Review: a list where a mapping belongs was an AttributeError traceback, a suite name that is
    no text became the figures' key as its repr, and a check of the figures printed pydantic's
    multi-line dump with its URL."""
    results = tmp_path / "s.json"
    results.write_text(json.dumps(doc))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc, stdout, err = cli(capsys, "export-policy", POLICIES / SHIPPED_BASE, "--out", out_dir / "x.pt", "--kind", "network",
                          "--commit", "0123abc", "--suite-figures", results, "--figures-of", "a")
    assert rc == 2 and stdout == ""
    line = one_error_line(err, str(results), *needles)
    assert "errors.pydantic.dev" not in line and "validation error" not in line
    assert list(out_dir.iterdir()) == []
