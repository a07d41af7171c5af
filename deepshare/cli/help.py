"""How every ``deepshare`` subcommand introduces itself: a one-line summary (listed in its parent's
``--help`` and first in its own), optional details, and at least one example command.

``tests/cli/test_help.py`` walks the whole parser: every subcommand has a summary and an example,
and every example parses.
"""

from __future__ import annotations

import argparse
from typing import Any

EXAMPLES_HEADING = "examples:"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that indented lines (the examples) are kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            if block.startswith("  ") or block.startswith(EXAMPLES_HEADING):
                blocks.append("\n".join(indent + line for line in block.splitlines()))
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)


def command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", name: str, summary: str,
            *examples: str, details: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``summary`` is one line without a final full stop; each example is
    a whole command line starting with ``deepshare``; ``details`` a paragraph after the summary."""
    if not examples:
        raise ValueError(f"deepshare {name}: a subcommand needs an example")
    description = summary[0].upper() + summary[1:] + "." + (f"\n\n{details}" if details else "")
    epilog = EXAMPLES_HEADING + "\n" + "\n".join(f"  {line}" for line in examples)
    return sub.add_parser(name, help=summary, description=description, epilog=epilog,
                          formatter_class=HelpFormatter, **kwargs)
