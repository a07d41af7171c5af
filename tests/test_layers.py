"""The package's layering, read from its import statements: who may import whom, and no cycles.

The folders of ``deepshare/`` are layers (``docs/architecture.md``). These tests read every
``import`` in the package with :mod:`ast` (module level, inside functions and under
``TYPE_CHECKING`` alike) and fail on an import a layer may not make or on any import cycle
between modules, so the picture in the documentation stays the code's.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "deepshare"

ALLOWED = {
    "core": set(),
    "tenants": {"core"},  # queues, quotas, admission: below the policies, whose registry has its orders
    "policies": {"core", "tenants"},
    "infra": {"core"},
    "agents": {"core"},
    "raycluster": {"core", "infra"},  # infra.raycompat: Ray's private autoscaler and label helpers
    "rl": {"core", "infra", "policies", "tenants"},
    "serving": {"core", "infra", "policies", "tenants"},
    "runtime": {"core", "infra", "policies", "agents", "tenants"},
    "experiments": {"core", "policies", "raycluster", "runtime", "tenants"},
    "cli": {"core", "policies", "infra", "agents", "raycluster", "rl", "serving", "runtime", "experiments", "tenants"},
    "job": {"runtime"},
}
"""Top-level package -> the packages it may import (besides itself)."""

HEAVY = ("ray", "torch", "fastapi", "starlette", "uvicorn", "requests", "matplotlib", "gymnasium")
"""Libraries the core never imports: it is the simulator, usable without any of them."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=1)
def _imports() -> dict[str, set[str]]:
    """Module -> every module name it imports (absolute names, relative ones resolved)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = {f"{base}.{a.name}" for a in node.names}
                submodules = {n for n in names if _is_module(n)}
                targets.update(submodules)
                if names - submodules:  # ``from package import submodule`` depends on the submodule only
                    targets.add(base)
        found[name] = targets
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_top_level_module_of_the_package_is_a_package():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []


def test_every_layer_imports_only_the_layers_below_it():
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} - {"data"}
    assert layers == set(ALLOWED), "a new top-level package needs its place in ALLOWED and in docs/architecture.md"
    wrong = []
    for module, targets in _imports().items():
        own = _layer(module)
        if own not in ALLOWED:
            continue
        for target in targets:
            other = _layer(target)
            if target.startswith("deepshare.") and _is_module(f"deepshare.{other}") and other != own \
                    and other not in ALLOWED[own]:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_core_imports_no_ray_torch_or_http_library():
    heavy = [f"{m} imports {t}" for m, targets in _imports().items() if _layer(m) == "core"
             for t in targets if t.split(".")[0] in HEAVY]
    assert heavy == []


def test_no_import_cycles_between_modules():
    graph = _imports()
    modules = set(graph)
    edges = {m: {t for t in targets if t in modules and t != m} for m, targets in graph.items()}
    # A module importing ``deepshare.x.y`` also runs the package ``deepshare.x``; that parent edge
    # is Python's, not a design choice, so only explicit imports count.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_layer_table_knows_only_real_packages():
    for layer, allowed in ALLOWED.items():
        assert (PACKAGE / layer / "__init__.py").is_file(), layer
        assert allowed <= set(ALLOWED), layer
