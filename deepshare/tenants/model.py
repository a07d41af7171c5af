"""The tenants file's pydantic schema (imported only when a file is parsed: decisions never need it).

Per-field checks live here; the checks across fields (duplicate names, priority classes included,
a cohort or default that is not declared, a lending limit above the nominal quota, a borrowing or
lending limit on a queue without a cohort) are
:func:`deepshare.tenants.spec._build`'s, which names the field in the same ``queues.1.name: ...`` form.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from deepshare.core.bounds import MAX_JOB_GPUS
from deepshare.core.names import CONTROL_RANGES, NO_CONTROL_CHARACTERS

_AROUND = r"[\t\n\v\f\r \x85\u2028\u2029]"
"""The control characters that are whitespace, which strips take from around a name."""
# Queue, cohort and class names go into requests to the placement service, logs and metrics labels.
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=253, pattern=NO_CONTROL_CHARACTERS)]
ClassKey = Annotated[str, StringConstraints(min_length=1, max_length=253,
                                            pattern=rf"^{_AROUND}*[^{CONTROL_RANGES}]*{_AROUND}*$")]
"""A priority class's name as written: stripped by ``_build``, which can then refuse two keys that
differ only by surrounding spaces (stripped here, they would be merged, the last one winning). No
control character inside it; surrounding whitespace (a tab, a line break, U+0085, U+2028) goes
with the strip, as a queue name's does."""
Gpus = Annotated[int, Field(strict=True, ge=0, le=MAX_JOB_GPUS * 1024)]


_EXPONENT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")
"""A decimal number with an exponent (``1e3``, ``2.5E-1``), as YAML 1.1 leaves some of them strings."""


class QueueModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name
    cohort: Optional[Name] = Field(default=None, description="the cohort it lends to and borrows from; none: alone")
    nominal_gpus: Gpus = Field(description="GPUs it is guaranteed (its quota)")
    borrowing_limit_gpus: Optional[Gpus] = Field(default=None, description="most GPUs above nominal it may borrow; none: no limit")
    lending_limit_gpus: Optional[Gpus] = Field(default=None, description="most of its unused nominal GPUs others may borrow; none: all")
    weight: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False, strict=True,  # strict: `true` is not 1.0
                          description="fair-share weight")
    @field_validator("weight", mode="before")
    @classmethod
    def _exponent(cls, value: object) -> object:
        """``1e3`` as the number it means: YAML 1.1 (PyYAML) reads a float with an exponent but no
        dot as a string, which would then be refused as "not a valid number". Only a string that is
        a decimal number with an exponent is read so (a quoted ``"1e3"`` too: once parsed, the two
        cannot be told apart); anything else is left for the field's checks (``true`` and other
        strings stay refused)."""
        if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
            return float(value)
        return value

    queueing: Literal["strict", "best-effort"] = Field(
        default="best-effort", description="best-effort: a job its quota holds is passed over, younger ones may go; "
                                           "strict: it holds back the queue's jobs after it (Kueue's StrictFIFO)")


class CohortModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name


class TokenModel(BaseModel):
    """One tenant of the live scheduler: who holds a bearer token, and the queues it owns."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="the tenant's name (in logs and answers; never the token)")
    queues: list[Name] = Field(min_length=1, max_length=1024, description="the queues it submits to and sees the jobs of")
    sha256: Annotated[str, StringConstraints(strip_whitespace=True, to_lower=True, pattern=r"^[0-9a-fA-F]{64}$")] = Field(
        description="hex SHA-256 of its bearer token (the file holds no secret)")


class TenantsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    queues: list[QueueModel] = Field(min_length=1)
    cohorts: list[CohortModel] = Field(default_factory=list)
    priority_classes: dict[ClassKey, Annotated[int, Field(strict=True, ge=-(10**9), le=10**9)]] = Field(default_factory=dict)
    default_priority: Optional[Name] = None
    default_queue: Optional[Name] = None
    queue_from: Optional[Literal["user", "vc"]] = None
    tokens: list[TokenModel] = Field(default_factory=list, max_length=10_000,
                                     description="the live scheduler's tenants and their tokens' hashes")
