"""Packaging as users install it: the license file matches pyproject, and the Makefile installs
the torch build the README says it does."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

APACHE_2_MD5 = "86d3f3a95c324c9479bd8986968f4327"
"""MD5 of the Apache License 2.0 text as distributed (with its appendix), 11,357 bytes."""


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_file_is_the_full_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.md5(text).hexdigest() == APACHE_2_MD5
    assert b"Apache License\n                           Version 2.0, January 2004" in text
    assert b"END OF TERMS AND CONDITIONS" in text


def test_pyproject_license_is_an_spdx_expression_naming_the_file() -> None:
    doc = _pyproject()
    assert doc["project"]["license"] == "Apache-2.0"  # a string (PEP 639), not a table
    assert doc["project"]["license-files"] == ["LICENSE"]
    assert not any("License ::" in c for c in doc["project"].get("classifiers", []))  # PEP 639 forbids both
    setuptools = next(r for r in doc["build-system"]["requires"] if r.startswith("setuptools"))
    minimum = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools.replace(" ", ""))
    assert minimum and int(minimum.group(1)) >= 77, setuptools  # the first setuptools accepting the string form


def test_makefile_and_docs_agree_on_torch() -> None:
    makefile = (ROOT / "Makefile").read_text()
    readme = (ROOT / "docs" / "getting-started.md").read_text()
    version = re.search(r"^TORCH_VERSION := (\S+)$", makefile, flags=re.M).group(1)
    assert f"torch=={version}" in readme
    assert "TORCH_INDEX ?=" in makefile
    install = next(line for line in makefile.splitlines() if "pip install -q torch==" in line)
    assert "$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))" in install
    assert "TORCH_INDEX" in readme and "TORCH_INDEX" in (ROOT / "README.md").read_text()  # how to force the CPU build
    assert "torch.version.cuda" in makefile  # and the Makefile prints which build it got
