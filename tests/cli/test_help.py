"""Every subcommand introduces itself (issue 29): its ``--help`` starts with a one-line summary and
ends with examples, and every example is a command line ``deepshare``'s parser accepts."""

from __future__ import annotations

import argparse
import shlex

import pytest

from deepshare.cli import build_parser
from deepshare.cli.help import EXAMPLES_HEADING


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subcommands(sub, (*path, name))


SUBCOMMANDS = dict(_subcommands(build_parser()))


def test_every_command_the_cli_has_is_checked() -> None:
    top = {path[0] for path in SUBCOMMANDS}
    assert {"simulate", "compare", "evaluate", "train", "tune", "imitate", "serve", "scheduler", "submit", "jobs",
            "cancel", "logs", "agents", "cluster", "autoscale", "trace", "policies", "clusters", "calibrate"} <= top
    assert ("scheduler", "start") in SUBCOMMANDS and ("agents", "probe") in SUBCOMMANDS


@pytest.mark.parametrize("path", sorted(SUBCOMMANDS), ids=" ".join)
def test_help_has_a_summary_and_examples_that_parse(path: tuple[str, ...]) -> None:
    text = SUBCOMMANDS[path].format_help()
    summary = " ".join(text.split("\n\n")[1].split())  # the paragraph after the usage, unwrapped
    assert summary.endswith(".") and summary.count(". ") == 0 and summary[0].isupper(), (path, summary)
    assert SUBCOMMANDS[path].description.split("\n")[0] == summary, path
    assert EXAMPLES_HEADING in text, path
    examples = [line.strip() for line in text.split(EXAMPLES_HEADING, 1)[1].splitlines() if line.strip()]
    assert examples, path
    for example in examples:
        argv = shlex.split(example)
        assert argv[0] == "deepshare" and tuple(argv[1:1 + len(path)]) == path, (path, example)
        build_parser().parse_args(argv[1:])  # exits (SystemExit) on anything the parser refuses
