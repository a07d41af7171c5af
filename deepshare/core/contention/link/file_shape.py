"""The shape of a link-parameter file (``deepshare calibrate --out``): its sections read as
mappings and numbers, each wrong one a DeepShareError naming the file and the field (a number
where a per-model mapping belongs was ``'float' object has no attribute 'items'``)."""

from __future__ import annotations

from typing import Any

from deepshare.core.errors import DeepShareError, shown


def section(doc: dict[str, Any], key: str, source: str, what: str, required: bool = False) -> dict[Any, Any]:
    """``doc[key]``, a mapping of ``what`` (absent: ``{}``, or an error when ``required``)."""
    if key not in doc:
        if required:
            raise DeepShareError(f"{source}: {key}: missing; expected a mapping of {what}")
        return {}
    value = doc[key]
    if not isinstance(value, dict):
        raise DeepShareError(f"{source}: {key}: expected a mapping of {what}, got {shown(value)}")
    return value


def table(doc: dict[str, Any], key: str, source: str, what: str) -> dict[Any, dict[Any, float]]:
    """``doc[key]``: model -> a mapping of ``what`` to numbers (``kappa``, ``sensitivity``)."""
    out = {}
    for model, row in section(doc, key, source, f"models to mappings of {what}").items():
        where = f"{source}: {key}.{str(model)[:64]}"
        if not isinstance(row, dict):
            raise DeepShareError(f"{where}: expected a mapping of {what}, got {shown(row)}")
        out[model] = {k: number(x, f"{where}.{str(k)[:64]}") for k, x in row.items()}
    return out


def number(value: Any, where: str) -> float:
    """``value`` as a float: a JSON number a float holds (not a bool, not text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DeepShareError(f"{where}: expected a number, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise DeepShareError(f"{where}: expected a number, got an integer no float holds") from None
