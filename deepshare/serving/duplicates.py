"""Duplicate keys in a placement request's JSON: a 422 naming each key and its path.

pydantic's JSON parser keeps the last value of a key an object names twice (most parsers do,
some keep the first, RFC 8259 leaves it open), so ``{"nodes": [...], "nodes": [...]}`` was
decided on its second list without a word: ambiguous input, and a body that a proxy in front
(which kept the first) would read as another request. :func:`duplicate_keys` refuses it.

The check is one pass of the standard library's C decoder whose object hook compares each
object's number of pairs with its number of distinct keys and keeps nothing (on a 1 MB body,
about a fifth of what pydantic's parse and validation take); only a body with a duplicate is
parsed again, to find the paths. A body the decoder cannot read (not JSON, not UTF-8, nested
past its recursion limit, an integer of more than 4,300 digits) passes unchecked: pydantic's
own parse refuses each of these as not JSON (400; its nesting limit is lower).
"""

from __future__ import annotations

import json
from typing import Any

from deepshare.serving.translate import FieldError, Loc, RequestError


class DuplicateKeys(RequestError):
    """A body naming a key twice in one object (HTTP 422, ``type`` ``duplicate_key``)."""

    kind = "duplicate_key"


class _Found(Exception):
    """Raised by the first pass's object hook at the first duplicate (the rest is not read)."""


def _refuse_duplicates(pairs: list[tuple[str, Any]], _dict: type = dict, _len: Any = len) -> None:
    """The first pass's object hook: nothing kept (the body is parsed for its keys alone)."""
    if _len(_dict(pairs)) < _len(pairs):
        raise _Found


class _Pairs(list):  # type: ignore[type-arg]
    """An object of the second pass: its pairs in order, duplicates kept."""


_FIRST = json.JSONDecoder(object_pairs_hook=_refuse_duplicates)
_SECOND = json.JSONDecoder(object_pairs_hook=_Pairs)


def duplicate_keys(raw: bytes) -> list[FieldError]:
    """Each key that ``raw`` names twice in one object, in body order, at its path (``body``,
    then keys and list indices); none when there is none or the decoder cannot read ``raw``
    (also where the part after a duplicate is unreadable: pydantic's parse refuses the body)."""
    try:
        _FIRST.decode(raw.decode("utf-8"))
        return []
    except _Found:
        pass
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return []
    try:  # the first pass stopped at the duplicate: what follows it may not be JSON at all
        tree = _SECOND.decode(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return []
    return _paths(tree)


def _paths(tree: Any) -> list[FieldError]:
    """The duplicates of a second-pass ``tree``, each path once (a key named three times, or
    under both values of a duplicate, is one error), walked without recursion."""
    found: dict[Loc, FieldError] = {}
    stack: list[tuple[Loc, Any]] = [(("body",), tree)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for key, _ in value:
                if key in seen and (*loc, key) not in found:
                    found[(*loc, key)] = FieldError((*loc, key), f"duplicate key {key!r}: an object names each key "
                                                                 "once (parsers differ on which value they keep)")
                seen.add(key)
            stack.extend(((*loc, key), child) for key, child in reversed(value))
        elif isinstance(value, list):
            stack.extend(((*loc, i), value[i]) for i in range(len(value) - 1, -1, -1))
    return list(found.values())
