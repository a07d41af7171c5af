"""Ray's private internals stay in ``deepshare/infra/raycompat.py``, and it refuses an unverified Ray.

Every use of a private Ray module (``ray._private``, ``ray._common``, ``ray.serve._private``,
``ray.autoscaler._private``, ...) is a function there that says why no public API serves and
which Ray it was verified on. These tests read every import and every dotted name in the
package, the tests and the benchmarks, fail on a private Ray import or name anywhere else, and
check the one-line refusal. Tests that must touch a private module (to patch it and put it back)
get it from a function there too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deepshare.infra import raycompat

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "deepshare"
COMPAT = PACKAGE / "infra" / "raycompat.py"
THIS = Path(__file__).resolve()
CHECKED = [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "bench").rglob("*.py"))]
"""Every Python file of the package, the tests and the benchmarks (none is exempt but the module
itself, and this file from the *name* scan only: its docstrings and pattern spell the names)."""

PRIVATE_NAME = re.compile(r"\bray(?:\.\w+)*\._[A-Za-z]\w*(?:\.\w+)*")
"""A dotted Ray name with a private part (``ray._private``, ``ray.serve._private.replica``, ...)."""

PRIVATE_ATTRIBUTE = re.compile(r"\bcluster\._[A-Za-z]\w*\(")
"""A private method of a ``ray.cluster_utils.Cluster`` called by hand (``cluster._wait_for_node(...)``)."""


def _private_ray_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            if parts[0] == "ray" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_private_ray_imports_are_only_in_the_compatibility_module():
    wrong = [hit for path in CHECKED if path != COMPAT for hit in _private_ray_imports(path)]
    assert wrong == [], "move these into deepshare/infra/raycompat.py, saying why and for which Ray"
    assert _private_ray_imports(COMPAT)  # it is where they are


def test_the_scan_covers_the_package_the_tests_and_the_benchmarks():
    where = {path.relative_to(ROOT).parts[0] for path in CHECKED}
    assert where == {"deepshare", "tests", "bench"}
    assert THIS in CHECKED and ROOT / "tests" / "raytools.py" in CHECKED


def test_private_ray_names_are_only_in_the_compatibility_module():
    named: dict[str, set[str]] = {}
    for path in CHECKED:
        if path in (COMPAT, THIS):
            continue
        text = path.read_text()
        hits = {*PRIVATE_NAME.findall(text), *PRIVATE_ATTRIBUTE.findall(text)}
        if hits:
            named[str(path.relative_to(ROOT))] = hits
    assert named == {}, "read these through deepshare/infra/raycompat.py (a function or constant saying why)"


def test_every_use_says_why_and_for_which_ray():
    tree = ast.parse(COMPAT.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.name != "require":
            doc = ast.get_docstring(node) or ""
            assert "Verified: Ray" in doc, node.name
            assert "Why:" in doc or node.name == "fake_node_number", node.name


def test_the_pin_in_pyproject_is_the_verified_series():
    text = (ROOT / "pyproject.toml").read_text()
    [(low, high)] = re.findall(r'"ray\[[^\]]*\]>=([\d.]+),<([\d.]+)"', text)
    assert raycompat.VERIFIED_MINORS == (low,)
    major, minor = low.split(".")
    assert high == f"{major}.{int(minor) + 1}"


def test_the_installed_ray_is_verified():
    raycompat.require("the tests")


USES = [
    lambda: raycompat.single_machine_mode_in_this_process(),
    lambda: raycompat.ray_constants_module(),
    lambda: raycompat.serve_replica_module(),
    lambda: raycompat.replica_grpc_on_loopback(),
    lambda: raycompat.node_label_syntax_check(),
    lambda: raycompat.cluster_config_prepare_and_validate(),
    lambda: raycompat.fake_multi_node_provider(),
    lambda: raycompat.rllib_deprecated_value(),
    lambda: raycompat.wait_for_node(object(), object(), 1.0),
]


@pytest.mark.parametrize("use", range(len(USES)))
def test_an_unverified_ray_is_refused_in_one_line_when_a_use_needs_it(monkeypatch, use):
    monkeypatch.setattr(raycompat, "_installed_ray", lambda: "2.99.0")
    with pytest.raises(raycompat.RayVersionError) as caught:
        USES[use]()
    message = str(caught.value)
    assert "\n" not in message and "this is Ray 2.99.0" in message and "2.60.x" in message


def test_a_patch_release_of_a_verified_series_is_accepted():
    raycompat.require("x", "2.60.7")
    with pytest.raises(raycompat.RayVersionError):
        raycompat.require("x", "2.6.0")


def test_importing_the_module_imports_no_ray():
    code = "import sys, deepshare.infra.raycompat, deepshare.infra.localray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_replica_patch_binds_loopback_once(monkeypatch):
    replica = raycompat.serve_replica_module()
    calls = []
    monkeypatch.setattr(replica, "add_port_to_grpc_server", lambda server, address: calls.append(address) or 1)
    raycompat.replica_grpc_on_loopback()
    raycompat.replica_grpc_on_loopback()  # idempotent: wraps once
    replica.add_port_to_grpc_server(None, "[::]:0")
    replica.add_port_to_grpc_server(None, "10.0.0.1:5")
    assert calls == ["127.0.0.1:0", "10.0.0.1:5"]
