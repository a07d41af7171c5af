"""--contention-knowledge, --perturb-contention and --true-params as a user meets them, their bad
values (one line, exit 2), and a suite's contention_knowledge key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"


def avg(capsys, tmp_path, *extra: object) -> tuple[float, str]:
    path = tmp_path / "r.json"
    rc, out, err = cli(capsys, "simulate", "--trace", BUNDLED, "--policy", "las+contention-aware", "--durations", "exact",
                       "--json", path, *extra)
    assert rc == 0, err
    return json.loads(path.read_text())["avg_jct_s"], out


def test_knowledge_and_world_flags(capsys, tmp_path):
    exact, _ = avg(capsys, tmp_path)
    learned_same_world, title = avg(capsys, tmp_path, "--contention-knowledge", "learned")
    assert "contention learned" in " ".join(title.split())
    # no perturbation: the learned model starts from the truth and stays near it
    assert learned_same_world == pytest.approx(exact, rel=0.1)
    world = ("--perturb-contention", "0.8", "--perturb-seed", "3")
    perturbed_exact, _ = avg(capsys, tmp_path, *world)
    assert perturbed_exact != exact  # the world changed: the jobs run at other rates
    assert avg(capsys, tmp_path, *world)[0] == perturbed_exact  # seeded
    assert avg(capsys, tmp_path, *world, "--contention-knowledge", "learned")[0] == \
        avg(capsys, tmp_path, *world, "--contention-knowledge", "learned")[0]


def test_true_params_run_the_world_on_a_parameter_file(capsys, tmp_path):
    from deepshare.core.contention.link import default_link_catalog

    links = default_link_catalog()
    from dataclasses import replace

    params = tmp_path / "true.json"
    params.write_text(replace(links, scale={m: 2.0 for m in links.models}).to_json())
    shipped, _ = avg(capsys, tmp_path, "--contention", "link")
    truer, _ = avg(capsys, tmp_path, "--contention", "link", "--true-params", params)
    assert truer != shipped


@pytest.mark.parametrize(
    "argv, needles",
    [
        (("--contention-knowledge", "oracle"), ("--contention-knowledge", "invalid choice")),
        (("--perturb-contention", "1.5"), ("--perturb-contention", "from 0 to 0.95")),
        (("--perturb-seed", "-1"), ("--perturb-seed",)),
    ],
)
def test_bad_knowledge_flag_values_are_usage_errors(capsys, argv, needles):
    rc, out, err = cli(capsys, "simulate", "--trace", BUNDLED, "--policy", "las+spread", *argv)
    assert rc == 2 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error:" in last and all(n in last for n in needles), last


@pytest.mark.parametrize(
    "argv, needles",
    [
        (("--true-params", "x.json"), ("--true-params needs --contention link",)),
        (("--contention", "link", "--true-params", "/nonexistent/true.json"), ("--true-params", "cannot read")),
        (("--perturb-contention", "0.5", "--contention", "link", "--true-params", "x.json"),
         ("at most one of --perturb-contention and --true-params",)),
    ],
)
def test_bad_world_inputs_exit_2_with_one_line(capsys, argv, needles):
    rc, _, err = cli(capsys, "simulate", "--trace", BUNDLED, "--policy", "las+spread", *argv)
    assert rc == 2
    one_error_line(err, *needles)


def test_a_suite_names_a_bad_contention_knowledge(capsys, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("heuristics: [las+consolidated]\ncontention_knowledge: [exact, oracle]\n")
    rc, _, err = cli(capsys, "evaluate", "--suite", suite)
    assert rc == 2
    one_error_line(err, "contention_knowledge")
    suite.write_text("heuristics: [las+consolidated]\nperturb_contention: 2\n")
    rc, _, err = cli(capsys, "evaluate", "--suite", suite)
    assert rc == 2
    one_error_line(err, "perturb_contention")


def test_a_flags_error_names_the_flag_once():
    """An error that already starts with the flag's name is not given it twice
    (``--perturb-contention: --perturb-contention: ...`` before)."""
    from deepshare.cli.args import flagged
    from deepshare.core.errors import DeepShareError

    def refuse(message):
        def parse(text):
            raise DeepShareError(message)
        return parse

    with pytest.raises(DeepShareError) as named:
        flagged("--perturb-contention", refuse("--perturb-contention: no"), "0.3")
    assert str(named.value) == "--perturb-contention: no"
    with pytest.raises(DeepShareError) as plain:
        flagged("--link-params", refuse("bad JSON"), "x.json")
    assert str(plain.value) == "--link-params: bad JSON"
