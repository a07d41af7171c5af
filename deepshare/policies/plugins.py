"""Policies that live outside this package: ``module:Attribute`` specs and installed entry points.

Researchers bring their own policy in two ways (``docs/writing-a-policy.md``):

* ``--policy package.module:ClassOrFactory`` (``=ARG`` passes one string argument) anywhere a
  policy is named: the attribute is imported, called (a class or a factory; an object that
  already is a policy is used as it is) and the result checked against the
  :class:`~deepshare.policies.base.Policy` protocol;
* an installed distribution declaring an entry point in the :data:`ENTRY_POINT_GROUP` group
  (``[project.entry-points."deepshare.policies"] my-policy = "my_pkg.policy:MyPolicy"``): its
  name then appears in ``deepshare policies`` and works like a built-in name.

Every failure (module not importable, attribute missing, the factory raising, a result that is
not a policy) is a :class:`DeepShareError` naming the spec, so the CLI prints one line.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

from deepshare.core.errors import DeepShareError
from deepshare.policies.base import Policy

if TYPE_CHECKING:  # importlib.metadata costs ~15 ms of start-up; only a name outside the registry reads entry points
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "deepshare.policies"
GUIDE = "docs/writing-a-policy.md"


def is_import_spec(name: str) -> bool:
    """Whether ``name`` (``NAME[=ARG]``) is a ``module:Attribute`` spec rather than a registry name."""
    return ":" in name.partition("=")[0]


def load_spec(spec: str) -> Any:
    """The object ``module:Attribute`` names (``Attribute`` may be dotted: ``Outer.Inner``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in [*module_name.split("."), *attr.split(".")]):
        raise DeepShareError(f"policy {spec!r}: expected package.module:ClassOrFactory (see {GUIDE})")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise DeepShareError(f"policy {spec!r}: no module named {module_name!r} on the Python path "
                                 "(install its package or add its folder to PYTHONPATH)") from None
        raise DeepShareError(f"policy {spec!r}: importing {module_name!r} failed: {_why(exc)}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module: any error (an exit too) is one line
        raise DeepShareError(f"policy {spec!r}: importing {module_name!r} failed: {_why(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DeepShareError(f"policy {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def build(obj: Any, spec: str, arg: str) -> Policy:
    """A policy from what a spec or entry point named: call a class or factory (with ``arg`` if given)."""
    if not isinstance(obj, type) and is_policy(obj):
        if arg:
            raise DeepShareError(f"policy {spec!r} is a policy object and takes no argument, got {arg!r}")
        return obj
    if not callable(obj):
        raise DeepShareError(f"policy {spec!r}: is a {type(obj).__name__}, not a Policy class or a factory returning one")
    try:
        policy = obj(arg) if arg else obj()
    except DeepShareError as exc:
        raise DeepShareError(f"policy {spec!r}: {exc}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's constructor: any error (a sys.exit, an
        # argparse inside a factory) is one line, not a silent end of the command with its code
        call = f"{getattr(obj, '__name__', 'factory')}({arg!r})" if arg else f"{getattr(obj, '__name__', 'factory')}()"
        raise DeepShareError(f"policy {spec!r}: {call} failed: {_why(exc)}") from None
    if not is_policy(policy):
        raise DeepShareError(
            f"policy {spec!r}: built a {type(policy).__name__}, which is not a Policy "
            f"(it needs a `name` string and a `decide(view)` method; see {GUIDE})"
        )
    return policy


def is_policy(obj: Any) -> bool:
    """The :class:`Policy` protocol, checked for what it promises: a string name and a callable decide."""
    return isinstance(getattr(obj, "name", None), str) and callable(getattr(obj, "decide", None))


def describe(obj: Any, fallback: str) -> str:
    """The first line of the object's docstring (a class's or a factory's), else ``fallback``."""
    doc = inspect.getdoc(obj if isinstance(obj, type) or callable(obj) else type(obj)) or ""
    first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return first or fallback


def installed(reserved: set[str]) -> dict[str, EntryPoint]:
    """Entry points of the :data:`ENTRY_POINT_GROUP` group by name, without names that shadow a
    built-in (``reserved``) or could not be parsed back (``=``, ``:``, ``,``, spaces)."""
    from importlib.metadata import entry_points

    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in reserved or ep.name in found or any(c in ep.name for c in "=:, ") or not ep.name:
            continue
        found[ep.name] = ep
    return found


def load_entry_point(ep: EntryPoint) -> Any:
    """The object an entry point names; a failure is one line naming the entry point."""
    try:
        return ep.load()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - another package's code: any error is one line
        raise DeepShareError(f"policy {ep.name!r} (entry point {ep.value!r}): cannot load it: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: it exited with code {exc.code!r}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__
