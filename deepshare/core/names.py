"""What a name given to DeepShare may hold: no control characters. Names end up in logs, metrics
labels, error messages and the placement service's requests, where such characters forge or
break lines, or reorder what a terminal shows. One rule for every reader: the placement
service's schema, a tenants file, a fabric file, the live scheduler's submissions and the client
that sends journalled names to the service."""

from __future__ import annotations

import re
import unicodedata

BEYOND_C0 = r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""The control characters past U+001F, as a regex class body (a policy card's text keeps tab and
newline, and refuses these with the other C0 controls)."""

CONTROL_RANGES = r"\x00-\x1f" + BEYOND_C0
"""A regex class body (Python's ``re`` and pydantic's Rust engine read it alike): the C0 controls
(NUL, tabs, line breaks, escapes), DEL and the C1 controls (U+0085 breaks lines too), the Unicode
line and paragraph separators, and the bidirectional marks, embeddings, overrides and isolates
(which make a terminal show a name's characters out of order)."""

NO_CONTROL_CHARACTERS = rf"^[^{CONTROL_RANGES}]+$"
"""A pydantic ``pattern``: a non-empty name without control characters."""

NO_CONTROL_CHARACTERS_OR_EMPTY = rf"^[^{CONTROL_RANGES}]*$"
"""As :data:`NO_CONTROL_CHARACTERS`, the empty text allowed."""

CONTROL_CHARACTERS_SAID = "control characters (line breaks, tabs, escapes, bidirectional marks)"
"""How an error names what :data:`CONTROL_RANGES` refuses."""

_CONTROL = re.compile(f"[{CONTROL_RANGES}]")


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a control character (:data:`NO_CONTROL_CHARACTERS` refuses it);
    a search in C, as the client checks every name of every job of a request."""
    return _CONTROL.search(text) is not None


def escaped(text: str) -> str:
    """``text`` with each control character written as ``\\xNN`` or ``\\uNNNN`` (other
    characters, backslashes included, as they are): what a name the rule refuses shows in a
    line that must stay one line."""
    return _CONTROL.sub(lambda found: _escape(found.group()), text)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff]")
"""Characters that show as nothing: the soft hyphen, the Mongolian vowel separator, the zero-width
space, non-joiner and joiner, the word joiner and invisible operators, the byte order mark."""


def name_identity(text: str) -> str:
    """What two names that look the same have in common: ``text`` without its invisible
    characters (:data:`INVISIBLE`) in Unicode's composed form (NFC: ``e`` + combining acute is
    ``\u00e9``). Names that must be unique (a cluster's nodes) are compared by it, so ``h1`` and
    ``h\u200b1`` are one name twice, not two nodes no one can tell apart; the names themselves are
    kept as written. (The joiners change how some scripts join letters: node names, ASCII in
    practice, are compared without them all the same.)"""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", INVISIBLE.sub("", text))
