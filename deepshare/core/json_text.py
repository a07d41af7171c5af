"""The JSON text DeepShare writes: standard JSON, whatever the numbers.

Python's ``json`` writes a float that is not finite as ``NaN`` or ``Infinity``, which jq,
JavaScript and strict parsers refuse; a report's mean of nothing (no held-out episode, no
cross-validation fold) is such a float. :func:`json_text` writes those as null: the CLI's
``--json`` reports (:func:`deepshare.cli.output.dumps`) and the imitation and expert-iteration
run summaries go through it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable


def json_text(doc: Any, default: Callable[[Any], Any] | None = None) -> str:
    """``doc`` as indented JSON with one trailing newline, each float that is not finite written
    as null; ``default`` as for :func:`json.dumps` (what an object JSON lacks becomes)."""
    try:
        return json.dumps(doc, indent=2, allow_nan=False, default=default) + "\n"
    except ValueError:
        if default is not None:  # objects turned into JSON may hold such floats too
            doc = json.loads(json.dumps(doc, default=default))
        return json.dumps(finite(doc), indent=2, allow_nan=False) + "\n"


def finite(doc: Any) -> Any:
    """``doc`` with every float that is not finite replaced by None."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {key: finite(value) for key, value in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [finite(value) for value in doc]
    return doc
