"""YAML documents validated by a pydantic model, with errors that name the file and the field."""

from __future__ import annotations

from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from deepshare.core.types import DeepShareError

M = TypeVar("M", bound=BaseModel)


def format_validation_error(exc: ValidationError) -> str:
    """One clause per problem: ``field.path: message``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse_yaml_model(text: str, model: type[M], source: str, expected: str) -> M:
    """``text`` as YAML, validated as ``model``; ``expected`` says what the top level should hold."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DeepShareError(f"{source}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise DeepShareError(f"{source}: expected a mapping with {expected}, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise DeepShareError(f"{source}: {format_validation_error(exc)}") from None
