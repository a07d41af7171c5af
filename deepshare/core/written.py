"""How a number is written in text a user gives (a flag, a trace cell, an import option): ASCII
digits with an optional sign, point and exponent, and ``inf``/``nan`` spelled out (callers refuse
those by range). Python's ``int`` and ``float`` also read ``1_000`` (digit groups) and other
scripts' digits (``١٢`` is 12), which no CSV tool reads as that number and which a typo or a
pasted value should not turn into a different number silently: text must match these first.
"""

from __future__ import annotations

import re

INTEGER_TEXT = r"[+-]?[0-9]+"
NUMBER_TEXT = r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)"
r"""(``[0-9]+\.?[0-9]*`` read the same texts, but split a run of digits that failed to match in
quadratically many ways: 12,000 digits and an ``x`` took 2 s, a trace cell of 131,072 minutes.)"""

INTEGER = re.compile(INTEGER_TEXT)
"""An integer, exactly (``fullmatch``)."""
NUMBER = re.compile(NUMBER_TEXT, re.IGNORECASE)
"""A number, exactly (``fullmatch``)."""
WRITTEN = {int: INTEGER, float: NUMBER}
"""The pattern a text must match before ``int`` or ``float`` reads it."""
