"""Bring your own policy: ``--policy module:ClassOrFactory`` and the ``deepshare.policies`` entry points.

The guide's example (``docs/examples/biggest_first.py``) runs through the real ``deepshare``
entry point and through the placement service's engine in-process; bad specs are one line and
exit 2 in every command that names a policy; an installed distribution's entry point shows up in
``deepshare policies`` and works by name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli, one_error_line

from deepshare.cli import main
from deepshare.core.errors import DeepShareError
from deepshare.policies import make_policy, policy_info, policy_names

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
GUIDE = ROOT / "docs" / "writing-a-policy.md"
SPEC = "biggest_first:BiggestFirst"


@pytest.fixture
def examples_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Path:
    """One 8-GPU node: a 2-GPU job of 400 s and an 8-GPU job of 100 s, both at t = 0."""
    path = tmp_path / "tiny.csv"
    path.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                    "j1-small,0,MoE,2,400,\nj2-big,0,MoE,8,100,\n")
    return path


def test_the_guide_shows_the_example_file_verbatim() -> None:
    """The guide includes the file itself (a pymdownx snippet, which `mkdocs build --strict`
    resolves in tests/docs), so what it shows is what this module runs."""
    code = (EXAMPLES / "biggest_first.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert '--8<-- "docs/examples/biggest_first.py"\n' in blocks or code in blocks
    assert len(code.splitlines()) <= 35


def test_example_through_the_real_cli_entry_point(tiny_trace: Path, tmp_path: Path) -> None:
    """Exact numbers: biggest first runs big (0-100 s) then small (100-500 s); FIFO the reverse."""
    exe = Path(sys.executable).parent / "deepshare"
    if not exe.exists():
        pytest.skip(f"no deepshare entry point next to {sys.executable}")
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES)}
    docs = {}
    for policy in (SPEC, "fifo+consolidated"):
        proc = subprocess.run([str(exe), "simulate", "--trace", str(tiny_trace), "--policy", policy, "--nodes", "1",
                               "--json", "-"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        docs[policy] = json.loads(proc.stdout)
    mine = docs[SPEC]
    assert mine["policy"] == "biggest-first"
    assert (mine["finished"], mine["avg_jct_s"], mine["makespan_s"]) == (2, pytest.approx(300.0), pytest.approx(500.0))
    assert docs["fifo+consolidated"]["avg_jct_s"] == pytest.approx(450.0)  # small 0-400, big 400-500


def test_example_through_compare_and_evaluate(capsys, examples_on_path, tiny_trace: Path, tmp_path: Path) -> None:
    rc, out, err = cli(capsys, "compare", "--trace", tiny_trace, "--nodes", 1, "--policies", f"{SPEC},fifo+consolidated",
                       "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["results"]["biggest-first"]["avg_jct_s"] == pytest.approx(300.0)
    rc, out, err = cli(capsys, "evaluate", "--trace", tiny_trace, "--nodes", 1, "--policies", SPEC, "--seeds", 1,
                       "--json", tmp_path / "e.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "e.json").read_text())["results"][SPEC]["avg_jct_s"] == pytest.approx(300.0)


def test_example_through_the_placement_service_engine(examples_on_path) -> None:
    from deepshare.serving.engine import EngineSettings, PlacementEngine
    from deepshare.serving.schemas import PlacementRequest

    engine = PlacementEngine(EngineSettings(policy=SPEC))
    request = PlacementRequest.model_validate({
        "now": 100,
        "nodes": [{"name": "n0", "gpus": 8, "free_gpus": 4}, {"name": "n1", "gpus": 8, "free_gpus": 8}],
        "running": [{"job_id": "r0", "model": "FSDP", "placement": {"n0": 4}}],
        "pending": [{"job_id": "p0", "model": "MobileNetV3", "gpus": 2}, {"job_id": "p1", "model": "FSDP", "gpus": 8},
                    {"job_id": "p2", "model": "FSDP", "gpus": 4}],
    })
    answer = {d.job_id: (d.action, d.placement) for d in engine.place(request).decisions}
    # p1 (8) takes n1 whole; p2 (4) then takes n0's 4 free; p0 (2) no longer fits
    assert answer == {"p1": ("place", {"n1": 8}), "p2": ("place", {"n0": 4}), "p0": ("wait", None)}
    assert engine.name == "biggest-first"
    described = engine.describe()  # GET /v1/policy
    assert described.name == "biggest-first" and described.description.startswith("Largest GPU demand first")


# -- bad specs: one line, exit 2, in every command that names a policy --------------------------------
@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "userpol.py").write_text(
        "from deepshare.core.types import WAIT\n"
        "class NotAPolicy:\n    pass\n"
        "class Broken:\n    name = 'broken'\n    def __init__(self):\n        raise RuntimeError('no GPU table here')\n"
        "class Fixed:\n    name = 'fixed'\n    def decide(self, view):\n        return WAIT\n"
        "INSTANCE = Fixed()\n"
        "def make(limit='4'):\n    p = Fixed()\n    p.name = f'fixed-{int(limit)}'\n    return p\n"
        "NUMBER = 3\n"
    )
    (tmp_path / "badimport.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "userpol"


BAD_SPECS = [
    ("nope:Thing", ["'nope:Thing'", "no module named 'nope'"]),
    ("userpol:Missing", ["'userpol:Missing'", "no attribute 'Missing'"]),
    ("userpol:NotAPolicy", ["'userpol:NotAPolicy'", "not a Policy", "`name`", "decide"]),
    ("userpol:Broken", ["'userpol:Broken'", "Broken() failed", "RuntimeError: no GPU table here"]),
    ("userpol:NUMBER", ["'userpol:NUMBER'", "is a int"]),
    ("userpol:make=lots", ["'userpol:make'", "ValueError"]),
    ("userpol:INSTANCE=3", ["takes no argument"]),
    ("badimport:X", ["importing 'badimport' failed", "not_installed_dependency_xyz"]),
    ("userpol:", ["expected package.module:ClassOrFactory"]),
]


def test_simulate_names_a_plugin_by_its_name_as_the_json_does(capsys, tiny_trace) -> None:
    rc, out, err = cli(capsys, "simulate", "--trace", tiny_trace, "--policy",
                       "deepshare.policies.registry:make_policy=fifo+packed", "--no-progress")
    assert rc == 0, err
    assert out.lstrip().startswith("fifo+packed on "), out[:200]  # the policy's name, as reports and compare say


@pytest.mark.parametrize(("spec", "needles"), BAD_SPECS, ids=[s for s, _ in BAD_SPECS])
def test_bad_spec_is_one_line_exit_2(capsys, user_module, tiny_trace, spec, needles) -> None:
    rc, out, err = cli(capsys, "simulate", "--trace", tiny_trace, "--policy", spec)
    assert (rc, out) == (2, "")
    one_error_line(err, "--policy", *needles)


@pytest.mark.parametrize("argv", [
    ["compare", "--trace", "T", "--policies", "las+spread,userpol:NotAPolicy"],
    ["evaluate", "--trace", "T", "--policies", "userpol:NotAPolicy"],
    ["serve", "--policy", "userpol:NotAPolicy", "--port", "1"],
    ["scheduler", "start", "--local", "--policy", "userpol:NotAPolicy"],
    ["autoscale", "simulate", "--trace", "T", "--config", "C", "--policy", "userpol:NotAPolicy"],
], ids=["compare", "evaluate", "serve", "scheduler", "autoscale"])
def test_bad_spec_fails_before_any_work_in_every_command(capsys, user_module, tiny_trace, tmp_path, argv) -> None:
    argv = [tiny_trace if a == "T" else tmp_path / "absent.yaml" if a == "C" else a for a in argv]
    rc, out, err = cli(capsys, *argv)
    assert rc == 2
    one_error_line(err, "userpol:NotAPolicy", "not a Policy")


def test_instances_factories_and_arguments(user_module) -> None:
    assert make_policy("userpol:INSTANCE").name == "fixed"
    assert make_policy("userpol:make").name == "fixed-4"
    assert make_policy("userpol:make=16").name == "fixed-16"
    assert make_policy("userpol:Fixed").name == "fixed"
    info = policy_info("userpol:Fixed=ignored")
    assert (info.heuristic, info.takes_argument) == (False, True)


# -- entry points ------------------------------------------------------------------------------------
@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake installed distribution declaring three deepshare.policies entry points."""
    site = tmp_path / "site"
    (site / "myplug-1.0.dist-info").mkdir(parents=True)
    (site / "myplug-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n")
    (site / "myplug-1.0.dist-info" / "entry_points.txt").write_text(
        "[deepshare.policies]\n"
        "biggest-first = biggest_first:BiggestFirst\n"
        "las+spread = biggest_first:BiggestFirst\n"   # a built-in name: never shadowed
        "broken-plugin = myplug_missing:Thing\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return site


def test_entry_point_policies_are_listed_and_usable_by_name(capsys, installed_plugin, tiny_trace) -> None:
    names = policy_names()
    assert names.count("las+spread") == 1 and "biggest-first" in names and "broken-plugin" in names
    assert "biggest-first" not in policy_names(heuristics_only=True)
    assert type(make_policy("las+spread")).__name__ == "HeuristicPolicy"
    rc, out, err = cli(capsys, "policies", "--json", "-")
    assert (rc, err) == (0, "")
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["biggest-first"]["description"].startswith("Largest GPU demand first")
    assert listed["broken-plugin"]["description"].startswith("cannot load:")
    assert "myplug_missing" in listed["broken-plugin"]["description"]
    rc, out, err = cli(capsys, "simulate", "--trace", tiny_trace, "--nodes", 1, "--policy", "biggest-first", "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["avg_jct_s"] == pytest.approx(300.0)
    rc, out, err = cli(capsys, "simulate", "--trace", tiny_trace, "--policy", "broken-plugin")
    assert rc == 2
    one_error_line(err, "--policy", "broken-plugin", "cannot load")


def test_unknown_name_mentions_the_spec_form() -> None:
    with pytest.raises(DeepShareError, match="package.module:ClassOrFactory"):
        make_policy("no-such-policy")


@pytest.mark.parametrize("command", [["simulate"], ["serve"], ["scheduler", "start"]])
def test_every_policy_flags_help_names_the_spec_form(capsys, command) -> None:
    """``--help`` of each command that takes ``--policy`` says module:Class works there."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "package.module:ClassOrFactory" in text


@pytest.mark.parametrize("spec, needle", [
    ("builtins:exit", "policy 'builtins:exit': factory() failed: SystemExit: it exited with code None"),
    ("sys:exit=3", "policy 'sys:exit': exit('3') failed: SystemExit: it exited with code '3'"),
])
def test_a_factory_that_exits_is_one_line_and_exit_2(capsys, spec, needle):
    """A factory calling sys.exit (an argparse inside it, say) ended the command silently with its
    code, 0 for a bare exit()."""
    trace = Path(__file__).resolve().parents[2] / "deepshare" / "data" / "traces" / "deepshare-simulate-trace0.json"
    rc, out, err = cli(capsys, "simulate", "--trace", trace, "--policy", spec)
    assert rc == 2 and out == ""
    one_error_line(err, needle)
