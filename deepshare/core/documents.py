"""The one guarded reader of YAML and JSON from users: files, ``--grid`` values, state files.

Parsers recurse once or more per level of nesting (PyYAML's composer, ``json``'s decoder), and
so does what reads their result afterwards (pydantic, jsonschema, ``copy.deepcopy``,
``yaml.safe_dump``). A config nested a thousand levels deep used to end the CLI with a
3,000-line ``RecursionError`` traceback. Every parse here either returns a document at most
:data:`MAX_DEPTH` levels deep or raises one :class:`DeepShareError` line that names the source,
says what was expected, and, for a syntax error, where it is. No real config comes near the
limit (the deepest shipped one, a KubeRay manifest, is 12 levels).

PyYAML is imported on first use, not with this module: commands that read no YAML do not pay for it.
"""

from __future__ import annotations

import json
from typing import Any

from deepshare.core.errors import DeepShareError

MAX_DEPTH = 100
"""Lists and mappings nested deeper than this are refused (readers downstream recurse per level)."""


def load_yaml(text: str, source: str, expected: str = "a YAML document") -> Any:
    """``text`` parsed as YAML (``safe_load``: plain data only); errors name ``source`` and ``expected``."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except RecursionError:
        raise _too_deep(source, expected) from None
    except yaml.YAMLError as exc:
        raise DeepShareError(f"{source}: not valid YAML ({yaml_problem(exc)})") from None
    return _checked(doc, source, expected)


def load_json(text: str | bytes, source: str, expected: str = "a JSON document", **kwargs: Any) -> Any:
    """``text`` parsed as JSON (``kwargs`` go to :func:`json.loads`); errors name ``source`` and ``expected``."""
    try:
        doc = json.loads(text, **kwargs)
    except RecursionError:
        raise _too_deep(source, expected) from None
    except json.JSONDecodeError as exc:
        raise DeepShareError(json_problem(text, source, exc)) from None
    except (ValueError, TypeError) as exc:  # bytes that are not UTF-8, a wrong type
        raise DeepShareError(f"{source}: not valid JSON ({exc})") from None
    return _checked(doc, source, expected)


def json_problem(text: str | bytes, source: str, exc: json.JSONDecodeError) -> str:
    """A JSON syntax error in one line: where, and what was there instead (a file that is not JSON
    at all is told apart from one cut short or corrupted)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text[: exc.pos].strip():
        return f"{source} line {exc.lineno}: expected a JSON document, got text starting {text.lstrip()[:40]!r}"
    return (f"{source} line {exc.lineno} column {exc.colno}: expected valid JSON, {exc.msg.lower()}"
            " (truncated or corrupted file?)")


def yaml_problem(exc: Exception) -> str:
    """A PyYAML error in one line: ``line L, column C: what the parser expected``."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"{where}{problem}"


def depth(doc: Any) -> int:
    """Levels of lists and mappings in ``doc`` (a scalar is 0), counted without recursion; at
    most ``MAX_DEPTH + 1``. YAML aliases can share a node or make it contain itself: a node is
    walked again only when reached at a deeper level, so that costs at most ``MAX_DEPTH`` walks
    of it, never one per path (a "billion laughs" file)."""
    deepest, stack = 0, [(doc, 1)]
    seen: dict[int, int] = {}
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None or seen.get(id(node), 0) >= level:
            continue
        seen[id(node)] = level
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((child, level + 1) for child in children)
    return deepest


def _checked(doc: Any, source: str, expected: str) -> Any:
    if depth(doc) > MAX_DEPTH:
        raise _too_deep(source, expected)
    return doc


def _too_deep(source: str, expected: str) -> DeepShareError:
    return DeepShareError(f"{source}: expected {expected}, got lists or mappings nested more than {MAX_DEPTH} levels deep")
