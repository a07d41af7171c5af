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


def in_range(convert: Callable[[str], float], low: float, high: float, unit: str = "", *, low_open: bool = False) -> Callable[[str], Any]:
    """A bounded ``type=``: the value must lie in ``[low, high]`` (``(low, high]`` with ``low_open``).

    Bounds keep absurd values (``1e308`` seconds, ``1e-300`` jobs/s, a billion nodes) from
    reaching the library, where they would overflow, never finish or exhaust memory; the error
    names the accepted range.
    """
    kind = "an integer" if convert is int else "a number"
    span = f"above {_plain(low)} and at most {_plain(high)}" if low_open else f"from {_plain(low)} to {_plain(high)}"
    expected = f"{kind} {span}{' ' + unit if unit else ''}"
    return number(convert, lambda v: (low < v if low_open else low <= v) and v <= high, expected)


def _plain(value: float) -> str:
    """``10,000,000`` rather than ``1e+07``; ``1e-09`` stays as it is."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


positive_float = number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
positive_int = number(int, lambda v: v > 0, "a positive integer")
non_negative_int = number(int, lambda v: v >= 0, "a non-negative integer")
port_number = number(int, lambda v: 0 <= v <= 65535, "a port number 0..65535 (0: any free port)")
listen_port = number(int, lambda v: 1 <= v <= 65535, "a port number 1..65535")


def print_line(out: Any, text: str) -> None:
    """One line to a rich console, printed as is (no markup, no highlighting, no wrapping)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


# Bounded flags of the simulator-side commands (the ranges are in each flag's error message).
round_seconds = in_range(float, 1, 1e7, "seconds")
overhead_seconds = in_range(float, 0, 1e6, "seconds")
node_count = in_range(int, 1, 65_536, "nodes")
gpus_per_node = in_range(int, 1, 1024, "GPUs")
job_count = in_range(int, 1, 10_000_000, "jobs")
arrival_rate = in_range(float, 1e-9, 1e6, "jobs/s")
offered_load = in_range(float, 0, 100, low_open=True)
duration_seconds = in_range(float, 1, 1e9, "seconds")
duration_sigma = in_range(float, 0, 5)
seed_value = in_range(int, 0, 2**63 - 1)
seed_count = in_range(int, 1, 1000, "seeds")
fold_count = in_range(int, 2, 100, "folds")
start_count = in_range(int, 1, 100, "starts")
worker_count = in_range(int, 1, 256, "processes")
iteration_count = in_range(int, 1, 1_000_000, "iterations")
runner_count = in_range(int, 0, 1024, "env runners")
wait_seconds = in_range(float, 0, 1e7, "seconds")
