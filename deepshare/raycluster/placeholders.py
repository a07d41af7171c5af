"""Placeholders a shipped cluster file leaves for the operator to fill in.

The templates name things only the operator knows in capitals: ``project_id: YOUR-GCP-PROJECT``,
``image: REGISTRY/deepshare:...``. They are valid YAML and pass every schema, so ``cluster
validate`` said "OK" and the mistake surfaced only at ``ray up`` (GCP: project not found) or as
a pod that never pulls its image. :func:`find_placeholders` names each one by its field path, for
``cluster validate`` to print as a warning beside the "OK".
"""

from __future__ import annotations

import re
from typing import Any

PLACEHOLDER = re.compile(r"^(YOUR[-_][A-Z0-9_-]+|REGISTRY/.*)\Z")
"""``YOUR-...`` / ``YOUR_...`` in capitals, or an image under the literal registry ``REGISTRY/``."""


def find_placeholders(doc: Any) -> list[tuple[str, str]]:
    """``(field path, value)`` of every string in ``doc`` that is a placeholder, in document order."""
    found = []
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node))))
        elif isinstance(node, str) and PLACEHOLDER.match(node.strip()):
            found.append((path, node.strip()))
    return found
