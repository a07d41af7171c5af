"""How a number is written in user text (:mod:`deepshare.core.written`): exactly the ASCII forms
``float`` reads that a CSV tool would read as the same number."""

from __future__ import annotations

import itertools

import pytest

from deepshare.core.written import INTEGER, NUMBER


@pytest.mark.parametrize("text", ["0", "-3", "+4", "1.", ".5", "1.5e-3", "2E+10", "inf", "-Infinity", "nan", "007"])
def test_plain_numbers_are_numbers(text):
    assert NUMBER.fullmatch(text) and float(text) == float(text) or text.lower().endswith("nan")


@pytest.mark.parametrize("text", ["", ".", "e5", "1_0", "١٢", "0x10", "1e", "1.2.3", "--1", " 1", "1 ", "infinit",
                                  "1" * 12_000 + "x"])
def test_other_texts_are_not(text):
    assert not NUMBER.fullmatch(text)


def test_the_pattern_reads_what_the_ambiguous_one_read():
    """The pattern once wrote the digits before a point as ``[0-9]+\\.?[0-9]*``, which backtracked
    quadratically on a long run of digits that failed to match (12,000 digits and an ``x``: 2 s; a
    trace cell can hold 131,072 characters). The rewrite reads the same texts: every string of up
    to 6 characters over the pattern's alphabet."""
    import re

    before = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
    for length in range(1, 7):
        for chars in itertools.product("09.eE+-xn", repeat=length):
            text = "".join(chars)
            assert bool(NUMBER.fullmatch(text)) == bool(before.fullmatch(text)), text
    assert INTEGER.fullmatch("-12") and not INTEGER.fullmatch("1.0")
