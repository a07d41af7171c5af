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
import re
import sys
from typing import Any

from deepshare.core.errors import DeepShareError, one_line

MAX_DEPTH = 100
"""Lists and mappings nested deeper than this are refused (readers downstream recurse per level)."""
MAX_YAML_VALUES = 100_000
"""A YAML document whose aliases stand for more values than this is refused ("billion laughs"):
the parser shares an aliased node, but every reader downstream (validation, ``json.dumps``, an
error quoting the value) walks it once per reference, so a few hundred bytes can stand for
9**9 strings. No real config comes near it (the largest shipped one stands for 151)."""


def load_yaml(text: str, source: str, expected: str = "a YAML document", max_values: int = MAX_YAML_VALUES) -> Any:
    """``text`` parsed as YAML (``safe_load``: plain data only); errors name ``source`` and ``expected``.
    A document of more than ``max_values`` values is refused while it is parsed, once that many
    are read (PyYAML spends about 13 us and 370 bytes on each: a 16 MiB list of numbers took
    minutes and gigabytes before the count after parsing refused it), and a document whose
    aliases stand for more once parsed."""
    import yaml

    loader = _strict_loader()(text)
    loader.budget = max_values
    try:
        doc = loader.get_single_data()
    except _TooManyValues:
        raise DeepShareError(f"{source}: expected {expected}, got a document of more than {max_values:,} values") from None
    except RecursionError:
        raise _too_deep(source, expected) from None
    except yaml.YAMLError as exc:
        raise DeepShareError(f"{source}: not valid {_language(source)} ({yaml_problem(exc)})") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit limit
        raise DeepShareError(f"{source}: not valid {_language(source)} ({' '.join(str(exc).split())[:200]})") from None
    finally:
        loader.dispose()
    doc = _checked(doc, source, expected, text)
    if values(doc, max_values) > max_values:
        what = "aliases that stand for" if "*" in text else "a document of"  # an alias is written *name
        raise DeepShareError(f"{source}: expected {expected}, got {what} more than {max_values:,} values")
    return doc


class _TooManyValues(Exception):
    """A document being parsed has more values than its reader's budget (:func:`load_yaml`)."""


def _language(source: str) -> str:
    """What a file read as YAML is called in its errors: JSON where its name says so (JSON is
    YAML, and the readers that take either parse both as YAML), YAML otherwise."""
    return "JSON" if source.lower().endswith(".json") else "YAML"


_LOADER: Any = None


def _strict_loader() -> Any:
    """PyYAML's SafeLoader refusing a key given twice in one mapping (PyYAML keeps the last,
    SQLite's and other readers the first: a spec must mean one thing); keys a merge (``<<``)
    brings in may still be overridden, as YAML defines."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class StrictLoader(yaml.SafeLoader):
            budget = MAX_YAML_VALUES
            """Values (nodes) left to compose before the document is refused (:func:`load_yaml`)."""

            def compose_node(self, parent: Any, index: Any) -> Any:
                if index is not None or parent is None:  # a mapping's key (index None) is no value: not counted
                    self.budget -= 1
                    if self.budget < 0:
                        raise _TooManyValues
                return super().compose_node(parent, index)

            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                if isinstance(node, yaml.MappingNode):
                    seen: set[Any] = set()
                    for key_node, _ in node.value:
                        if key_node.tag == "tag:yaml.org,2002:merge":
                            continue
                        key = self.construct_object(key_node, deep=deep)
                        try:
                            duplicate = key in seen
                            seen.add(key)
                        except TypeError:  # an unhashable key: SafeLoader's own error follows
                            continue
                        if duplicate:
                            shown = key if isinstance(key, (str, int, float, bool)) or key is None else type(key).__name__
                            raise yaml.constructor.ConstructorError(
                                None, None, f"duplicate key {str(shown)[:64]!r} (give each key once)", key_node.start_mark)
                return super().construct_mapping(node, deep=deep)

        _LOADER = StrictLoader
    return _LOADER


def values(doc: Any, limit: int) -> int:
    """How many values ``doc`` stands for, a shared (aliased) list or mapping counted once per
    reference, without walking it more than once; stops counting past ``limit``. ``doc`` must be
    free of cycles (:func:`depth` refuses those)."""
    counted: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, ready = stack.pop()
        children = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None or id(node) in counted:
            continue
        if not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in children if isinstance(child, (dict, list)))
            continue
        total = 1
        for child in children:
            total += counted.get(id(child), 1)
        counted[id(node)] = total = min(total, limit + 1)
    return counted.get(id(doc), 1)


def load_json(text: str | bytes, source: str, expected: str = "a JSON document", **kwargs: Any) -> Any:
    """``text`` parsed as JSON (``kwargs`` go to :func:`json.loads`); errors name ``source`` and ``expected``."""
    try:
        doc = json.loads(text, **kwargs)
    except RecursionError:
        raise _too_deep(source, expected) from None
    except json.JSONDecodeError as exc:
        raise DeepShareError(json_problem(text, source, exc)) from None
    except DuplicateKey as exc:  # with object_pairs_hook=unique_keys
        raise DeepShareError(f"{source}: the key '{one_line(str(exc.args[0]))[:100]}' is given twice in one object; "
                             f"expected {expected} with each key once") from None
    except (ValueError, TypeError) as exc:  # bytes that are not UTF-8, a wrong type, a huge integer
        huge = _huge_integer(text, source) if "integer string conversion" in str(exc) else None
        raise DeepShareError(huge or f"{source}: not valid JSON ({exc})") from None
    return _checked(doc, source, expected, text)


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|(-?[0-9]+)(?![.eE0-9])|-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?')
"""JSON strings (skipped), integers (group 1: what Python converts to ``int``) and other numbers."""


def _huge_integer(text: str | bytes, source: str) -> str | None:
    """Where ``text`` writes an integer Python refuses to convert (its own message names a
    setting of Python's, not the file's line), or None: the first such integer outside strings,
    by the limit Python applies now (``sys.get_int_max_str_digits``; 0: none)."""
    most = sys.get_int_max_str_digits()
    if not most:
        return None
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    for token in _TOKENS.finditer(data):
        digits = token.group(1)
        if digits is not None and len(digits.lstrip(b"-")) > most:
            line = data.count(b"\n", 0, token.start()) + 1
            return (f"{source} line {line}: expected a number of at most {most:,} digits, "
                    f"got one of {len(digits.lstrip(b'-')):,}")
    return None


class DuplicateKey(ValueError):
    """A JSON object gave one key twice (``args[0]``: the key)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` ``object_pairs_hook`` refusing a key given twice in one object (Python's
    parser keeps the last, other readers the first: a proxy that checked one value and a server
    that acts on the other would disagree), as the YAML reader refuses one."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))  # type: ignore[func-returns-value]
    return doc


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


def _checked(doc: Any, source: str, expected: str, text: str | bytes = "") -> Any:
    if depth(doc) > MAX_DEPTH:
        raise _too_deep(source, expected)
    if _SURROGATE_ESCAPE.search(text if isinstance(text, str) else text.decode("utf-8", "replace")):
        _refuse_lone_surrogates(doc, source)
    return doc


_SURROGATE_ESCAPE = re.compile(r"\\[uU]0{0,4}[dD][89a-fA-F]")
"""An escape of a UTF-16 surrogate (``\\ud800``) in JSON or YAML text: only then can a parsed
string hold a lone one."""


def _refuse_lone_surrogates(doc: Any, source: str) -> None:
    """Refuse a string (key or value) holding a lone UTF-16 surrogate: legal as an escape in JSON
    and YAML, but no such string can be written out as UTF-8 (a report, a CSV, a spec), so it
    would end a run with an encoding traceback after the work was done."""
    stack, seen = [doc], set()
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                raise DeepShareError(f"{source}: {node[:40].encode('utf-8', 'backslashreplace').decode()!r}: expected "
                                     "text, got a lone UTF-16 surrogate escape (\\ud800-\\udfff not in a pair)") from None
        elif isinstance(node, (dict, list)) and id(node) not in seen:
            seen.add(id(node))
            stack.extend([*node.keys(), *node.values()] if isinstance(node, dict) else node)


def _too_deep(source: str, expected: str) -> DeepShareError:
    return DeepShareError(f"{source}: expected {expected}, got lists or mappings nested more than {MAX_DEPTH} levels deep")
