"""``deepshare export-policy``: a flag's or a source file's value that would be written wrong is
refused with one ``deepshare: error:`` line naming the flag (or the metadata field) and what was
expected, exit 2, and nothing written: rule numbers in plain ASCII digits, a utilisation floor
from 0 to 1, an ``--out`` name without control characters, no flag silently ignored, and a
training command ``deepshare train`` would run."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from cli_run import cli, one_error_line
from policy_files import write_policy_file

from deepshare.cli import build_parser
from deepshare.core.bounds import MAX_ENV_RUNNERS, MAX_TRAIN_SEED
from deepshare.core.errors import DeepShareError
from deepshare.policies.checkpoint import shipped
from deepshare.policies.policy_card import TRAIN_FLAG_RANGES, read_card, shipped_cards, training_of, validate_card

ROOT = Path(__file__).resolve().parents[2]
LOADED_JSON = ROOT / "docs" / "results" / "suite" / "loaded.json"
SOURCE = shipped("rl_base.pt")
BASE = ("--commit", "abcdef1")
PREEMPT = ("--kind", "hybrid-preempt", "--preemptive", "bsrsf+uncontended+preempt")


def export(capsys, tmp_path: Path, *flags: object, source: Path = SOURCE, out: Path | None = None):
    """``export-policy SOURCE --out tmp/p.pt --commit abcdef1 FLAGS``: (rc, stdout, stderr)."""
    return cli(capsys, "export-policy", source, "--out", out or tmp_path / "p.pt", *BASE, *flags)


def refused(capsys, tmp_path: Path, *flags: object, needles: tuple[str, ...], **kw) -> str:
    """The export is refused in one line holding ``needles``, with nothing written in ``tmp_path``."""
    before = sorted(tmp_path.iterdir())
    rc, out, err = export(capsys, tmp_path, *flags, **kw)
    assert (rc, out) == (2, ""), (rc, out, err)
    line = one_error_line(err, *needles)
    assert sorted(tmp_path.iterdir()) == before
    return line


# -- 1: rule values are plain ASCII number text ----------------------------------------------------
@pytest.mark.parametrize(("flags", "needle"), [
    (("--kind", "hybrid", "--hybrid-rules", "min_ratio=1_0"), "--hybrid-rules: min_ratio: expected a number >= 0, got '1_0'"),
    (("--kind", "hybrid", "--hybrid-rules", "anchor_streak=\u0661\u0660"),
     "--hybrid-rules: anchor_streak: expected a whole number of launches in 1..1024, got '\u0661\u0660'"),
    (("--kind", "hybrid", "--hybrid-rules", "utilisation_floor=\uff10.5"), "--hybrid-rules: utilisation_floor: expected"),
    ((*PREEMPT, "--preempt-rules", "min_gain=2_5"), "--preempt-rules: min_gain: expected a number >= 0, got '2_5'"),
])
def test_rule_values_read_ascii_digits_only(tmp_path, capsys, flags, needle):
    """``--hybrid-rules min_ratio=1_0`` wrote min_ratio 10.0 and ``anchor_streak=١٠`` wrote 10 to
    the file and its card (rc 0): ``float``/``int`` read digit groups and other scripts' digits."""
    refused(capsys, tmp_path, *flags, needles=(needle,))


def test_plain_rule_values_are_written(tmp_path, capsys):
    rc, _, err = export(capsys, tmp_path, *PREEMPT, "--hybrid-rules", "min_ratio= 1.5 ,anchor_streak=4,utilisation_floor=1",
                        "--preempt-rules", "min_gain=2e-1")
    assert (rc, err) == (0, ""), err
    rules = read_card(tmp_path / "p.card.yaml").rules
    assert rules.hybrid_rules.model_dump(exclude_none=True) == {"min_ratio": 1.5, "anchor_streak": 4, "utilisation_floor": 1.0}
    assert rules.preempt_rules.min_gain == 0.2


# -- 2: utilisation_floor is a share from 0 to 1 ------------------------------------------------------
@pytest.mark.parametrize("value", ["5", "1.0001"])
def test_a_utilisation_floor_above_one_is_refused(tmp_path, capsys, value):
    """``utilisation_floor=5`` was written (utilisation never exceeds 1: the net fires on every decision)."""
    refused(capsys, tmp_path, "--kind", "hybrid", "--hybrid-rules", f"utilisation_floor={value}",
            needles=(f"--hybrid-rules: utilisation_floor: expected a share of the GPUs from 0 to 1, got '{value}'",))


def test_a_card_with_a_utilisation_floor_above_one_is_refused():
    card_file = shipped("rl_est_hybrid_preempt.pt").with_name("rl_est_hybrid_preempt.card.yaml")
    raw = yaml.safe_load(card_file.read_text())
    assert raw["rules"]["hybrid_rules"]["utilisation_floor"] == 0.0
    validate_card(raw, "c.card.yaml")  # the shipped card, as it is
    raw["rules"]["hybrid_rules"]["utilisation_floor"] = 1.5
    with pytest.raises(DeepShareError, match=r"^c\.card\.yaml: .*utilisation_floor.*less than or equal to 1"):
        validate_card(raw, "c.card.yaml")
    assert all(not isinstance(card, DeepShareError) for _, card in shipped_cards())  # every shipped card still loads


# -- 3: --out's file name holds no control characters; the summary prints as one line -----------------
@pytest.mark.parametrize("name", ["a\nb.pt", "a\rb.pt", "a\tb.pt", "a\x1b[31mb.pt", "a\u202eb.pt"])
def test_an_out_name_with_a_control_character_is_refused(tmp_path, capsys, name):
    """``--out $'a\\nb.pt'`` wrote the file, a card naming it across two lines, and printed the
    summary line across two lines."""
    refused(capsys, tmp_path, "--kind", "network", out=tmp_path / name,
            needles=("--out ", "expected a file name without control characters"))


def test_a_card_naming_weights_with_a_newline_is_refused():
    raw = yaml.safe_load(shipped("rl_base.pt").with_name("rl_base.card.yaml").read_text())
    raw["weights"] = "rl\nbase.pt"
    with pytest.raises(DeepShareError, match=r"^c\.card\.yaml: weights: .*control characters"):
        validate_card(raw, "c.card.yaml")


def test_the_summary_line_is_one_line(tmp_path, capsys):
    """A card's text may hold a newline (``--figures-note``); the facts line printed it raw."""
    rc, out, err = export(capsys, tmp_path, "--kind", "network", "--figures-note", "first\nsecond")
    assert (rc, err) == (0, ""), err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("wrote ")
    assert lines[1].endswith("no suite figures (first\\nsecond)")
    assert read_card(tmp_path / "p.card.yaml").figures_note == "first\nsecond"  # the card keeps it


# -- 4: no flag is silently ignored -------------------------------------------------------------------
@pytest.mark.parametrize(("flags", "needles"), [
    (("--kind", "network", "--figures-of", "rl-base"), ("--figures-of rl-base: ", "give --suite-figures too")),
    ((*PREEMPT, "--loaded-by", "rl-hybrid-preempt", "--suite-figures", LOADED_JSON, "--figures-note", "none"),
     ("--figures-note: ", "leave --figures-note out")),
    (("--kind", "network", "--summary", "   "), ("--summary '   ': expected some text",)),
    (("--kind", "network", "--summary", ""), ("--summary '': expected some text",)),
    (("--kind", "network", "--figures-note", " "), ("--figures-note ' ': expected some text",)),
    (("--kind", "network", "--training-command", ""), ("--training-command '': expected some text",)),
    (("--kind", "network", "--loaded-by", "rl-base", "--loaded-by", "rl-base"), ("--loaded-by rl-base: given twice",)),
])
def test_flags_that_would_be_ignored_are_refused(tmp_path, capsys, flags, needles):
    """Each of these exported with rc 0: --figures-of and --figures-note were dropped, a blank
    summary became the default one, and loaded_by listed rl-base twice."""
    refused(capsys, tmp_path, *flags, needles=needles)


def test_figures_of_with_suite_figures_and_a_note_without_them_still_work(tmp_path, capsys):
    rc, _, err = export(capsys, tmp_path, *PREEMPT, "--hybrid-rules", "min_ratio=1.01,utilisation_floor=0",
                        "--suite-figures", LOADED_JSON, "--figures-of", "rl-hybrid-preempt")
    assert (rc, err) == (0, ""), err
    assert "loaded" in read_card(tmp_path / "p.card.yaml").figures
    rc, _, err = export(capsys, tmp_path, "--kind", "network", "--figures-note", "not measured", "--summary", "a net",
                        out=tmp_path / "q.pt")
    assert (rc, err) == (0, ""), err
    card = read_card(tmp_path / "q.card.yaml")
    assert (card.figures_note, card.summary) == ("not measured", "a net")


# -- 5: the rebuilt training command is one `deepshare train` runs ------------------------------------
TRAIN = {"config": "rllib_configs/rl_est_ppo.yaml", "name": "x", "seed": 2, "iterations": 40,
         "env": {"durations": ["exact"], "estimate_errors": [0.5]}, "run": {"num_env_runners": 3}}


@pytest.mark.parametrize(("key", "value", "needles"), [
    ("iterations", -5, ("metadata iterations: expected an integer from 1 to 1,000,000", "--iterations", "got -5")),
    ("iterations", 0, ("metadata iterations: ", "got 0")),
    ("iterations", 1e308, ("metadata iterations: ", "got 1e+308")),
    ("seed", -1, ("metadata seed: expected an integer from 0 to", "--seed", "got -1")),
    ("seed", 2**70, ("metadata seed: ", f"got {2**70}")),
    ("seed", MAX_TRAIN_SEED + 1, ("metadata seed: ", f"got {MAX_TRAIN_SEED + 1}")),
    # beyond a float's range: math.isfinite raised OverflowError, a traceback (second read)
    ("iterations", 10**400, ("metadata iterations: ", "--iterations")),
    ("run", {"num_env_runners": MAX_ENV_RUNNERS + 1}, ("metadata run.num_env_runners: ", "--num-env-runners")),
    ("env", {"estimate_errors": [9.0]}, ("metadata env.estimate_errors: ", "--estimate-error", "got 9.0")),
])
def test_metadata_train_would_refuse_is_refused(tmp_path, capsys, key, value, needles):
    """``iterations: -5`` or ``seed: 2**70`` in a file's metadata were only checked to be whole
    numbers: the card's ``training.command`` said ``--iterations -5``, which ``train`` refuses."""
    source = write_policy_file(tmp_path / "src.pt", {**TRAIN, key: value})
    line = refused(capsys, tmp_path, "--kind", "network", source=source, out=tmp_path / "out.pt",
                   needles=(*needles, "--training-command"))
    assert "Traceback" not in line


def test_an_estimate_error_beyond_a_floats_range_is_one_line(tmp_path, capsys):
    """``math.isfinite(10**400)`` raised OverflowError: a traceback (second read)."""
    source = write_policy_file(tmp_path / "src.pt", {**TRAIN, "env": {"estimate_errors": [10**400]}})
    line = refused(capsys, tmp_path, "--kind", "network", source=source, out=tmp_path / "out.pt",
                   needles=("metadata env.estimate_errors: expected numbers >= 0",))
    assert "Traceback" not in line


@pytest.mark.parametrize("at", ["low", "high"])
def test_rebuilt_commands_at_each_bound_parse_with_the_train_parser(at):
    """The ranges are the train flags' own: a command rebuilt at a bound is one the CLI parses."""
    pick = 0 if at == "low" else 1
    bound = {flag: TRAIN_FLAG_RANGES[flag][pick] for flag in TRAIN_FLAG_RANGES}
    metadata = {**TRAIN, "iterations": bound["--iterations"], "seed": bound["--seed"],
                "env": {"estimate_errors": [bound["--estimate-error"]]},
                "run": {"num_env_runners": bound["--num-env-runners"]}}
    args = build_parser().parse_args(shlex.split(training_of(metadata).command, comments=True)[1:])
    assert (args.iterations, args.seed, args.estimate_error, args.num_env_runners) == (
        bound["--iterations"], bound["--seed"], bound["--estimate-error"], bound["--num-env-runners"])


def test_a_given_training_command_still_exports_but_a_negative_seed_is_not_carded(tmp_path, capsys):
    source = write_policy_file(tmp_path / "src.pt", {**TRAIN, "iterations": -5})
    rc, _, err = export(capsys, tmp_path, "--kind", "network", "--training-command", "deepshare train x.yaml",
                        source=source, out=tmp_path / "out.pt")
    assert (rc, err) == (0, ""), err
    assert read_card(tmp_path / "out.card.yaml").training.command == "deepshare train x.yaml"
    source = write_policy_file(tmp_path / "neg.pt", {**TRAIN, "seed": -1})
    rc, out, err = export(capsys, tmp_path, "--kind", "network", "--training-command", "deepshare train x.yaml",
                          source=source, out=tmp_path / "neg_out.pt")
    assert (rc, out) == (2, "")
    one_error_line(err, "neg_out.card.yaml: training: seed: ", "greater than or equal to 0")


# -- 6: second review: figures, a card beside weights that do not load, --anchor alone -------------------
def _suite(tmp_path: Path, summary: dict) -> Path:
    import json

    path = tmp_path / "figures" / "s.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"suite": {"name": "s"}, "summary": summary}))
    return path


@pytest.mark.parametrize("entry", ["fifo+consolidated", "OTHER"])
def test_figures_that_are_not_this_files_are_refused(tmp_path, capsys, entry):
    """A suite whose only entry was a heuristic challenger, or another file's policy, put its
    figures on this file's card (rc 0)."""
    other = tmp_path / "other.pt"
    other.write_bytes(SOURCE.read_bytes())
    name = f"rl-hybrid={other}" if entry == "OTHER" else entry
    figures = _suite(tmp_path, {name: {"geomean_avg_jct_ratio": 0.5}})
    rc, out, err = export(capsys, tmp_path, "--kind", "network", "--suite-figures", figures)
    assert (rc, out) == (2, "") and not (tmp_path / "p.pt").exists()
    one_error_line(err, "say which with --figures-of")
    rc, out, err = export(capsys, tmp_path, "--kind", "network", "--suite-figures", figures, "--figures-of", name)
    assert (rc, out) == (2, "") and not (tmp_path / "p.pt").exists()
    one_error_line(err, f"--figures-of {name}: ", "a heuristic" if entry != "OTHER" else "judged another file")


def test_a_lone_learned_entry_is_still_taken(tmp_path, capsys):
    figures = _suite(tmp_path, {"rl-base": {"geomean_avg_jct_ratio": 0.9}})
    rc, _, err = export(capsys, tmp_path, "--kind", "network", "--suite-figures", figures)
    assert (rc, err) == (0, ""), err
    assert read_card(tmp_path / "p.card.yaml").figures["s"].geomean_avg_jct_ratio == 0.9


def test_anchor_alone_keeps_the_sources_other_hybrid_rules(tmp_path, capsys):
    """``--anchor`` alone dropped the source's ``anchor_streak: 4``: the file decided otherwise."""
    rc, _, err = export(capsys, tmp_path, "--kind", "hybrid", "--anchor", "srsf+uncontended", "--teacher",
                        "bsrsf+uncontended", source=shipped("rl_est_ppo.pt"))
    assert (rc, err) == (0, ""), err
    rules = read_card(tmp_path / "p.card.yaml").rules.hybrid_rules
    assert (list(rules.anchor), rules.anchor_streak) == (["srsf", "uncontended"], 4)
    rc, _, err = export(capsys, tmp_path, "--kind", "hybrid", "--anchor", "srsf+uncontended", "--hybrid-rules",
                        "min_ratio=0.5", "--teacher", "bsrsf+uncontended", source=shipped("rl_est_ppo.pt"),
                        out=tmp_path / "q.pt")
    assert (rc, err) == (0, ""), err
    rules = read_card(tmp_path / "q.card.yaml").rules.hybrid_rules
    assert rules.anchor_streak is None and rules.min_ratio == 0.5  # --hybrid-rules replaces the section, as documented


def test_a_card_beside_weights_that_do_not_load_is_shown_out_of_step(tmp_path, capsys):
    """Truncated weights stopped `policies --card` with the loader's error (rc 2): the card was
    not shown and the sha256 check, made for exactly this, never reported."""
    rc, _, err = export(capsys, tmp_path, "--kind", "network")
    assert rc == 0, err
    weights = tmp_path / "p.pt"
    weights.write_bytes(weights.read_bytes()[:1000])
    rc, out, err = cli(capsys, "policies", "--card", weights)
    assert rc == 1, (out, err)
    assert "OUT OF STEP: weights_sha256: p.pt has sha256" in out and "weights: " in out


@pytest.mark.parametrize(("seeds", "needle"), [(f"0,{MAX_TRAIN_SEED + 1}", "expected seeds from 0 to"),
                                               ("0,1,1", "a seed listed twice")])
def test_seeds_tried_are_training_seeds_each_once(tmp_path, capsys, seeds, needle):
    refused(capsys, tmp_path, "--kind", "network", "--seeds-tried", seeds, needles=(f"--seeds-tried {seeds!r}: {needle}",))


def test_the_card_is_renamed_before_its_weights(tmp_path, monkeypatch, capsys):
    """A kill between the two renames left new weights without their card, unseen: the card goes first."""
    import deepshare.core.output_set as output_set

    order = []
    real = output_set._rename_all

    def recording(ready):
        order.extend(Path(target).name for _, target, _ in ready)
        return real(ready)

    monkeypatch.setattr(output_set, "_rename_all", recording)
    rc, _, err = export(capsys, tmp_path, "--kind", "network")
    assert rc == 0, err
    assert order == ["p.card.yaml", "p.pt"]


@pytest.mark.parametrize("summary", [{"planner": 0.5}, {"rl-base": 0.5, "srsf+packed": 1.0}])
def test_figures_are_not_guessed_from_the_planner_or_from_a_learned_name_among_others(tmp_path, capsys, summary):
    """Second read: the planner counted as learned, and a bare learned name beside heuristics was
    taken without --figures-of or --loaded-by (the parent refused both)."""
    figures = _suite(tmp_path, {name: {"geomean_avg_jct_ratio": value} for name, value in summary.items()})
    rc, out, err = export(capsys, tmp_path, "--kind", "network", "--suite-figures", figures)
    assert (rc, out) == (2, "") and not (tmp_path / "p.pt").exists()
    one_error_line(err, "say which with --figures-of")


@pytest.mark.parametrize(("by_durations", "needle"), [({"exact": -5.0}, "greater than 0"),
                                                      ({"bogus model": 1.0}, "exact")])
def test_a_cards_figures_per_information_model_are_the_three_models_with_positive_ratios(by_durations, needle):
    card_file = shipped("rl_est_hybrid_preempt.pt").with_name("rl_est_hybrid_preempt.card.yaml")
    raw = yaml.safe_load(card_file.read_text())
    suite = next(iter(raw["figures"]))
    raw["figures"][suite]["by_durations"] = by_durations
    with pytest.raises(DeepShareError, match=f"^c\\.card\\.yaml: .*by_durations.*{needle}"):
        validate_card(raw, "c.card.yaml")
