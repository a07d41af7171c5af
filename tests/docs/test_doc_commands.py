"""Every command in the README and the documentation works (issue 29: the README's own tour
crashed and nothing ran it). Blocks run in a temporary folder on the bundled data; blocks marked
``<!-- doc-test: parse-only: REASON -->`` have their ``deepshare`` commands parsed by the CLI's
own parser (``doc_blocks.py`` says how blocks are found and marked)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli
from doc_blocks import ROOT, Block, all_blocks, commands, deepshare_argv, logical_lines, markdown_files

from deepshare.cli import build_parser

BLOCKS = all_blocks()
RUNNABLE_PAGES = sorted({b.path for b in BLOCKS if b.parse_only is None})
LINKED = ("deepshare", "docs", "examples", "rllib_configs", "cluster_yamls", "serve", "deploy", "tests")
"""Repository folders a block may read (linked into its temporary folder; nothing writes there)."""
NEVER_RUN = ("deepshare serve", "scheduler start", "agents start", "cluster fake", "autoscale live", "deepshare train",
             "deepshare tune", "calibrate --profiles", "ray ", "kubectl", "docker", "helm", "make ")
"""What a runnable block must not do: start servers or clusters, train, take minutes, or leave the machine."""
BLOCK_TIMEOUT_S = 120


def test_blocks_are_found_everywhere_and_both_kinds_exist() -> None:
    pages = {b.path.relative_to(ROOT).as_posix() for b in BLOCKS}
    assert {"README.md", "docs/getting-started.md", "docs/simulator.md", "docs/learned-policies.md", "docs/scheduler.md",
            "docs/placement-service.md", "docs/deploying.md", "docs/writing-a-policy.md"} <= pages
    assert any(b.parse_only for b in BLOCKS) and any(b.parse_only is None for b in BLOCKS)
    assert len(markdown_files()) > 10 and ROOT / "deepshare" / "data" / "policies" / "README.md" in markdown_files()


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_every_deepshare_command_parses(block: Block) -> None:
    """Runnable or not, each `deepshare ...` of a block is one the CLI accepts, and every line is
    shell words (a quote that never closes fails here)."""
    parser = build_parser()
    for line in logical_lines(block.code):
        for words in commands(line):
            argv = deepshare_argv(words)
            if argv is None:
                continue
            try:
                parser.parse_args(argv)
            except SystemExit as exc:
                pytest.fail(f"{block.where}: `deepshare {' '.join(argv)}` does not parse (exit {exc.code})")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.parse_only is None], ids=lambda b: b.where)
def test_runnable_blocks_stay_cheap_and_local(block: Block) -> None:
    for line in logical_lines(block.code):
        for never in NEVER_RUN:
            assert never not in f"{line} ", f"{block.where}: `{line}` must be in a parse-only block ({never.strip()})"
        assert "--port" not in line and "--address" not in line, f"{block.where}: `{line}` listens or joins a cluster"


def _workdir(tmp: Path) -> Path:
    for name in LINKED:
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEEPSHARE_SERVE_TOKEN", "DEEPSHARE_SCHEDULER_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    env["COLUMNS"] = "140"
    return env


IN_PROCESS_UNSAFE = re.compile(r"[<>$`*?\[\]~{}]|^[A-Za-z_][A-Za-z0-9_]*=")
"""What needs a shell: redirections, expansions, globs, command substitution, assignments."""
SHELL_STATE = ("export", "cd", "source", ".", "set", "unset", "alias", "pushd", "popd", "trap", "function")
"""Builtins whose effect outlives their line: a block using one runs in one bash, as written."""


def block_plan(block: Block) -> list[tuple[str, object]]:
    """How the block runs, line by line: ``("py", argv)`` for a plain ``deepshare`` command (no
    shell feature: operators, redirections, expansions), run in this process without an
    interpreter start; ``("sh", line)`` for any other line, run by bash. A block that changes the
    shell's state (``export``, ``cd``...) is one ``("sh", code)`` step."""
    plan: list[tuple[str, object]] = []
    for line in logical_lines(block.code):
        words = commands(line)
        if any(w and w[0] in SHELL_STATE for w in words):
            return [("sh", block.code)]
        argv = deepshare_argv(words[0]) if len(words) == 1 else None
        if argv is None or IN_PROCESS_UNSAFE.search(line) or any(ch in line for ch in ";&|()"):
            plan.append(("sh", line))
        else:
            plan.append(("py", argv))
    return plan


def run_in_process(argv: list[str], work: Path, where: str, monkeypatch, capsys) -> None:
    """One command through ``deepshare.cli.main`` (:func:`cli_run.cli`) in the block's folder and
    environment, as the shell would run it: exit status 0 and no traceback, or the block fails."""
    monkeypatch.chdir(work)
    environment = _environment()
    for key in set(os.environ) - set(environment):
        monkeypatch.delenv(key)
    for key, value in environment.items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    rc, _, err = cli(capsys, *argv)
    assert rc in (0, None), f"{where}: `deepshare {' '.join(argv)}` exited {rc}:\n{err[-3000:]}"
    assert "Traceback" not in err, f"{where}:\n{err[-3000:]}"


def run_in_bash(code: str, work: Path, where: str) -> None:
    script = "set -euo pipefail\ntrap 'jobs -p | xargs -r kill 2>/dev/null' EXIT\n" + code
    done = subprocess.run(["bash", "-c", script], cwd=work, env=_environment(), capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_runnable_blocks_run(page: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """A page's runnable blocks, in order, in one temporary folder (a later block may read what an
    earlier one wrote, as a reader following the page would), each line as :func:`block_plan` says."""
    work = _workdir(tmp_path)
    for block in (b for b in BLOCKS if b.path == page and b.parse_only is None):
        for how, what in block_plan(block):
            if how == "py":
                run_in_process(what, work, block.where, monkeypatch, capsys)  # type: ignore[arg-type]
            else:
                run_in_bash(what, work, block.where)  # type: ignore[arg-type]


def test_plain_deepshare_lines_run_in_process_and_shell_ones_in_bash() -> None:
    def plan(code: str) -> list[tuple[str, object]]:
        return block_plan(Block(ROOT / "README.md", 1, code, None))

    assert plan("deepshare compare --trace t.json \\\n  --cluster testbed\n# a comment\npython -m deepshare policies\n") == [
        ("py", ["compare", "--trace", "t.json", "--cluster", "testbed"]), ("py", ["policies"])]
    for line in ("deepshare simulate --json - | head -3", "deepshare simulate > out.txt", "ls runs",
                 "deepshare evaluate --out $HOME/x", "DS=1 deepshare policies", "deepshare a && deepshare b",
                 "deepshare simulate --trace runs/*.json"):
        assert plan(f"deepshare policies\n{line}\n") == [("py", ["policies"]), ("sh", line)], line
    code = "export PYTHONPATH=docs/examples\ndeepshare policies\n"
    assert plan(code) == [("sh", code)]  # what export sets, the next line needs
    steps = [how for b in BLOCKS if b.parse_only is None for how, _ in block_plan(b)]
    assert "py" in steps and "sh" in steps
