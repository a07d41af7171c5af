"""Flag value types and output helpers shared by every ``deepshare`` subcommand module.

Each type converts and checks a flag's text and, when it is wrong, says what was expected
(argparse prints it with the flag's name and exits 2).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable


def number(convert: Callable[[str], float], ok: Callable[[float], bool], expected: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that converts and checks a flag's value, naming what was expected."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


positive_float = number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
positive_int = number(int, lambda v: v > 0, "a positive integer")
non_negative_int = number(int, lambda v: v >= 0, "a non-negative integer")
port_number = number(int, lambda v: 0 <= v <= 65535, "a port number 0..65535 (0: any free port)")
listen_port = number(int, lambda v: 1 <= v <= 65535, "a port number 1..65535")


def print_line(out: Any, text: str) -> None:
    """One line to a rich console, printed as is (no markup, no highlighting, no wrapping)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)
