"""A card's ``loaded_by`` and ``policies --card NAME=PATH``'s NAME are checked against the registry:
``--card NAME=PATH`` ignored NAME (``rl-hybrid=rl_base.pt`` showed a network-alone card as fine,
``srsf+packed=FILE`` showed one at all), and a card could list a name that loads other weights,
or no file at all (``loaded_by: [planner]``), and ``export-policy --loaded-by`` could write one."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.policies import checkpoint, policy_card
from deepshare.policies.checkpoint import SHIPPED, SHIPPED_BASE, SHIPPED_PREEMPT, scorer_from_file
from deepshare.policies.policy_card import card_path, card_yaml, check_card, read_card

POLICIES = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "policies"
KIND_FILES = {"network": SHIPPED_BASE, "hybrid": SHIPPED, "hybrid-preempt": SHIPPED_PREEMPT}
LOADS_AS = {"rl-base": "network", "rl-hybrid": "hybrid", "rl-hybrid-preempt": "hybrid-preempt"}
PREEMPT_FLAGS = ("--kind", "hybrid-preempt", "--preemptive", "bsrsf+uncontended+preempt",
                 "--hybrid-rules", "min_ratio=1.01,utilisation_floor=0,anchor_streak=4")


@pytest.fixture
def registry_copy(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the shipped folder that the registry loads from and the listing reads."""
    folder = tmp_path / "policies"
    shutil.copytree(POLICIES, folder)
    monkeypatch.setattr(checkpoint, "shipped", lambda name=SHIPPED: folder / name)
    monkeypatch.setattr(policy_card, "shipped_folder", lambda: folder)
    return folder


def _edit_card(path: Path, **update) -> None:
    path.write_text(card_yaml(read_card(path).model_copy(update=update)))


# -- 1: --card NAME=PATH -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, why", [
    ("srsf+packed", "(a heuristic: it loads no policy file)"),
    ("planner", "(its argument is no policy file)"),
    ("rl-nothing", "got 'rl-nothing'"),
    ("cardmod_marker:Policy", "got 'cardmod_marker:Policy'"),
    ("", "(no name before '=')"),
])
def test_card_name_path_refuses_a_name_that_loads_no_policy_file(capsys, name, why) -> None:
    rc, out, err = cli(capsys, "policies", "--card", f"{name}={POLICIES / SHIPPED}")
    assert rc == 2 and out == ""
    one_error_line(err, f"--card {name}=", "NAME: expected rl-base, rl-hybrid or rl-hybrid-preempt", why)


def test_card_name_path_reports_a_card_of_another_kind_than_name_loads(capsys) -> None:
    """Each name fits exactly the card of its own kind; any other is a problem (exit 1, card shown)."""
    for name, as_kind in LOADS_AS.items():
        for kind, weights in KIND_FILES.items():
            given = f"{name}={POLICIES / weights}"
            rc, out, err = cli(capsys, "policies", "--card", given)
            assert err == "", err
            if kind == as_kind:
                assert rc == 0 and "DOES NOT FIT" not in out, given
                continue
            assert rc == 1, given
            assert out.rstrip("\n").splitlines()[-1] == (
                f"# DOES NOT FIT {name}: kind: {name} loads a file as {as_kind} ({policy_card.KINDS[as_kind]}), "
                f"but the card's file is {kind} ({policy_card.KINDS[kind]}); load it as {policy_card.KIND_LOADER[kind]}")
            rc, out, err = cli(capsys, "policies", "--card", given, "--json", "-")
            assert (rc, err) == (1, "")
            assert [p.split(":")[0] for p in json.loads(out)["problems"]] == ["kind"]


def test_the_example_of_the_report_a_network_card_loaded_as_rl_hybrid(capsys) -> None:
    rc, out, _ = cli(capsys, "policies", "--card", f"rl-hybrid={POLICIES / 'rl_base.pt'}")
    assert rc == 1 and "the card matches its weights" in out and "load it as rl-base" in out


# -- 2: loaded_by ------------------------------------------------------------------------------------
EXPECTED = " (expected rl-base, rl-hybrid or rl-hybrid-preempt)"


@pytest.mark.parametrize("loaded_by, needle", [
    (["planner"], "loaded_by: 'planner' loads no shipped file by default" + EXPECTED),
    (["srsf+packed"], "loaded_by: 'srsf+packed' loads no shipped file by default" + EXPECTED),
    (["rl-nothing"], "loaded_by: 'rl-nothing' loads no shipped file by default" + EXPECTED),
    (["cardmod_marker:Policy"], "loaded_by: 'cardmod_marker:Policy' loads no shipped file by default" + EXPECTED),
    (["rl-hybrid", "rl-hybrid"], "loaded_by: 'rl-hybrid' is listed twice"),
])
def test_a_card_listing_a_name_that_loads_no_shipped_file_is_out_of_step(tmp_path: Path, capsys, loaded_by, needle) -> None:
    """Such a card still reads (an earlier export-policy wrote ``--loaded-by planner`` or a plugin's
    name: old cards keep loading), is out of step, and imports nothing."""
    import sys

    shutil.copy(POLICIES / SHIPPED, tmp_path / SHIPPED)
    path = card_path(tmp_path / SHIPPED)
    path.write_text(card_path(POLICIES / SHIPPED).read_text().replace("loaded_by:\n- rl-hybrid\n",
                                                                      f"loaded_by: {json.dumps(loaded_by)}\n"))
    card = read_card(path)
    assert card.loaded_by == loaded_by
    assert check_card(card, tmp_path / SHIPPED) == [needle]
    rc, out, err = cli(capsys, "policies", "--card", path)
    assert (rc, err) == (1, "") and f"# OUT OF STEP: {needle}" in out
    assert "cardmod_marker" not in sys.modules


def test_a_card_claiming_a_name_that_loads_another_file_is_out_of_step(registry_copy: Path, capsys) -> None:
    wrong = card_path(registry_copy / "rl_base_dagger.pt")
    _edit_card(wrong, loaded_by=["rl-base"])
    weights = registry_copy / "rl_base_dagger.pt"
    assert check_card(read_card(wrong), weights) == [
        f"loaded_by: rl-base loads {SHIPPED_BASE} by default, not rl_base_dagger.pt"]
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    shown = {p["name"]: p for p in json.loads(out)}["rl-base"]["card"]  # the wrong claim is shown, not hidden
    assert shown["card"] == wrong.name and "loaded_by: rl-base loads" in shown["problem"]
    rc, out, err = cli(capsys, "policies", "--card", "rl-base")
    assert (rc, err) == (1, "")
    assert f"# OUT OF STEP: loaded_by: rl-base loads {SHIPPED_BASE} by default, not rl_base_dagger.pt" in out


def test_a_card_claiming_a_name_for_other_weights_of_the_same_name_is_out_of_step(tmp_path: Path, capsys) -> None:
    """A copy of the shipped card and file agrees; the same name with other weights does not."""
    mine = tmp_path / SHIPPED
    shutil.copy(POLICIES / SHIPPED, mine)
    shutil.copy(card_path(POLICIES / SHIPPED), card_path(mine))
    assert check_card(read_card(card_path(mine)), mine) == []
    mine.write_bytes((POLICIES / SHIPPED_BASE).read_bytes())  # other weights, the card made to match them
    _edit_card(card_path(mine), weights_sha256=hashlib.sha256(mine.read_bytes()).hexdigest())
    problems = check_card(read_card(card_path(mine)), mine)
    assert len(problems) == 1 and problems[0].startswith(f"loaded_by: rl-hybrid loads a {SHIPPED} with sha256 ")
    rc, out, _ = cli(capsys, "policies", "--card", mine)
    assert rc == 1 and "OUT OF STEP: loaded_by: rl-hybrid loads" in out


def test_the_card_of_a_file_a_name_loads_must_list_the_name(registry_copy: Path, capsys) -> None:
    _edit_card(card_path(registry_copy / SHIPPED), loaded_by=[])
    weights = registry_copy / SHIPPED
    _, encoding, metadata = scorer_from_file(weights)
    assert check_card(read_card(card_path(weights)), weights, metadata, encoding) == [
        f"loaded_by: rl-hybrid loads {SHIPPED} by default; the card does not list it"]
    rc, out, _ = cli(capsys, "policies", "--card", weights)
    assert rc == 1 and "the card does not list it" in out
    # by the name too: that card was "it ships no card" (exit 2), and the listing showed none
    rc, out, err = cli(capsys, "policies", "--card", "rl-hybrid")
    assert (rc, err) == (1, "") and "# OUT OF STEP: loaded_by: rl-hybrid loads" in out and "the card does not list it" in out
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    shown = {p["name"]: p for p in json.loads(out)}["rl-hybrid"]["card"]
    assert shown["card"] == card_path(weights).name and "the card does not list it" in shown["problem"]


# -- 2: export-policy --------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needles", [
    ((*PREEMPT_FLAGS, "--loaded-by", "rl-hybrid-preempt"),
     ("--loaded-by rl-hybrid-preempt: rl-hybrid-preempt loads", f"{SHIPPED_PREEMPT} by default, not --out")),
    (("--kind", "network", "--loaded-by", "planner"), ("--loaded-by planner: expected rl-base, rl-hybrid or rl-hybrid-preempt",)),
])
def test_export_refuses_a_loaded_by_the_registry_does_not_load(tmp_path: Path, capsys, args, needles) -> None:
    out = tmp_path / "out" / "x.pt"
    out.parent.mkdir()
    rc, stdout, err = cli(capsys, "export-policy", POLICIES / SHIPPED_BASE, "--out", out, "--commit", "0123abc",
                          "--figures-note", "none", *args)
    assert rc == 2 and stdout == ""
    one_error_line(err, *needles)
    assert list(out.parent.iterdir()) == []


def test_export_of_the_file_a_name_loads_needs_that_name(registry_copy: Path, capsys) -> None:
    out = registry_copy / SHIPPED_PREEMPT
    before = out.read_bytes(), card_path(out).read_text()
    flags = ("export-policy", POLICIES / SHIPPED_BASE, "--out", out, *PREEMPT_FLAGS, "--commit", "0123abc",
             "--figures-note", "none")
    rc, _, err = cli(capsys, *flags)
    assert rc == 2
    one_error_line(err, f"--out {out}: rl-hybrid-preempt loads this file by default; give --loaded-by rl-hybrid-preempt")
    assert (out.read_bytes(), card_path(out).read_text()) == before
    rc, _, err = cli(capsys, *flags, "--loaded-by", "rl-hybrid-preempt")
    assert (rc, err) == (0, ""), err
    card = read_card(card_path(out))
    assert card.loaded_by == ["rl-hybrid-preempt"] and check_card(card, out, scorer_from_file(out)[2]) == []


def test_export_of_a_file_to_copy_over_the_one_a_name_loads_lists_the_name(tmp_path: Path, registry_copy: Path,
                                                                           capsys) -> None:
    """Written elsewhere first (a staging folder; a checkout while an installed package runs) under the
    shipped file's name, then copied in: ``--loaded-by`` was refused there, and the card written
    without it was out of step once copied in."""
    staged = tmp_path / "stage" / SHIPPED_PREEMPT
    staged.parent.mkdir()
    rc, _, err = cli(capsys, "export-policy", POLICIES / SHIPPED_BASE, "--out", staged, *PREEMPT_FLAGS,
                     "--loaded-by", "rl-hybrid-preempt", "--commit", "0123abc", "--figures-note", "none")
    assert (rc, err) == (0, ""), err
    assert read_card(card_path(staged)).loaded_by == ["rl-hybrid-preempt"]
    for path in (staged, card_path(staged)):
        shutil.copy(path, registry_copy / path.name)
    out = registry_copy / SHIPPED_PREEMPT
    assert check_card(read_card(card_path(out)), out, scorer_from_file(out)[2]) == []
    rc, _, err = cli(capsys, "policies", "--card", "rl-hybrid-preempt")
    assert (rc, err) == (0, ""), err
