"""YAML documents validated by a pydantic model, with errors that name the file and the field.

PyYAML and pydantic are imported when a document is parsed, not with this module: commands
that only read a user's config file as text (or never read one) do not pay for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from deepshare.core.documents import MAX_YAML_VALUES, load_yaml
from deepshare.core.errors import DeepShareError
from deepshare.core.files import CONFIG_BYTES, read_input_text
from deepshare.core.names import has_control_character

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound="BaseModel")


def _loc_part(part: object) -> str:
    """A field path's part as written, or quoted (``repr``) when it holds a control character
    (:mod:`deepshare.core.names`): a mapping key with a line break would otherwise break the
    one-line error."""
    text = str(part)
    return repr(text) if has_control_character(text) else text


def format_validation_error(exc: ValidationError) -> str:
    """One clause per problem: ``field.path: message``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(_loc_part(x) for x in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse_yaml_model(text: str, model: type[M], source: str, expected: str,
                     max_values: int = MAX_YAML_VALUES) -> M:
    """``text`` as YAML (through the guarded :func:`~deepshare.core.documents.load_yaml`, at most
    ``max_values`` values), validated as ``model``; ``expected`` says what the top level should hold."""
    from pydantic import ValidationError

    raw = load_yaml(text, source, f"a mapping with {expected}", max_values)
    if not isinstance(raw, dict):
        raise DeepShareError(f"{source}: expected a mapping with {expected}, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise DeepShareError(f"{source}: {format_validation_error(exc)}") from None


def read_config_text(path: str | Path, kind: str, label: str | None = None) -> str:
    """A user's config file as UTF-8 text; an error names it (``label``, default the path) and
    says what it should have been (``kind``: "file", "training config", ...). It must be a
    regular file of at most :data:`~deepshare.core.files.CONFIG_BYTES`
    (:func:`~deepshare.core.files.read_input_text`)."""
    return read_input_text(path, kind, CONFIG_BYTES, label=label)
