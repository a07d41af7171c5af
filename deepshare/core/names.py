"""What a name given to DeepShare may hold: no control characters (NUL, line breaks, tabs,
escapes, U+0000-U+001F). Names end up in logs, metrics labels, error messages and the placement
service's requests, where such characters forge or break lines. One rule for every reader: the
placement service's schema, a tenants file, the live scheduler's submissions and the client that
sends journalled names to the service."""

from __future__ import annotations

import re

NO_CONTROL_CHARACTERS = r"^[^\x00-\x1f]+$"
"""A pydantic ``pattern``: a non-empty name without control characters."""

_CONTROL = re.compile(r"[\x00-\x1f]")


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a control character (:data:`NO_CONTROL_CHARACTERS` refuses it);
    a search in C, as the client checks every name of every job of a request."""
    return _CONTROL.search(text) is not None
