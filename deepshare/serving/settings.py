"""What a placement service runs with: the policy, the limits of its HTTP front and of the work
one request may cause.

The same settings come from ``deepshare serve`` flags or from the ``args`` of a Serve config
(``serve/config.yaml``); bad values are refused with the field's name before anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deepshare.core.errors import DeepShareError

from deepshare.infra.httpauth import MAX_TOKEN_CHARS, MIN_TOKEN_CHARS, TOKEN_PATTERN
from deepshare.serving.schemas import MAX_JOBS, MAX_NODES

if TYPE_CHECKING:
    from deepshare.tenants import Tenants

TOKEN_ENV = "DEEPSHARE_SERVE_TOKEN"

DEFAULT_MAX_NODES = MAX_NODES
DEFAULT_MAX_PENDING = 5000
DEFAULT_MAX_RUNNING = MAX_JOBS
DEFAULT_DECISION_TIMEOUT_S = 5.0
DEFAULT_BODY_TIMEOUT_S = 5.0


MAX_BODY_BYTES = 1024**3
"""Largest ``max_body_bytes`` a service may be given (1 GiB), from the flag or a Serve config."""


class ServiceSettings(BaseModel):
    """The settings, each field checked where it is set.

    ``hide_input_in_errors``: a refused value is not repeated in the error, which Serve, Ray and
    ``deepshare serve`` print: a refused ``token`` is commonly the real secret with a trailing
    newline (and a refused ``tenants`` text can be a megabyte). The messages still name the field
    and the rule. ``repr=False`` keeps the token out of the settings' repr too."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, hide_input_in_errors=True)

    policy: str = Field("rl-hybrid", description="registry name, NAME=CHECKPOINT for a learned policy, "
                        "or package.module:ClassOrFactory")
    contention: str = Field("profiled", description="contention model behind the policy's predictions")
    token: str | None = Field(
        None, min_length=MIN_TOKEN_CHARS, max_length=MAX_TOKEN_CHARS, pattern=TOKEN_PATTERN, repr=False,
        description=f"bearer token everything but GET/HEAD /healthz requires; None = read ${TOKEN_ENV}, empty there = no token",
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0, le=MAX_BODY_BYTES, description="larger request bodies get 413 (at most 1 GiB)")
    body_timeout_s: float = Field(
        DEFAULT_BODY_TIMEOUT_S, ge=0.001, le=3600, description="a body not received whole within this gets 408 and the connection closes"
    )
    max_nodes: int = Field(DEFAULT_MAX_NODES, gt=0, le=MAX_NODES, description="more nodes in one request get 413")
    max_pending: int = Field(DEFAULT_MAX_PENDING, gt=0, le=MAX_JOBS, description="more pending jobs in one request get 413")
    max_running: int = Field(DEFAULT_MAX_RUNNING, gt=0, le=MAX_JOBS, description="more running jobs in one request get 413")
    decision_timeout_s: float = Field(
        DEFAULT_DECISION_TIMEOUT_S, ge=0.001, le=3600,
        description="a decision not made within this (queueing included) is abandoned and answered 503 with Retry-After",
    )
    decision_threads: int = Field(4, gt=0, le=64, description="decisions one replica runs at once; more wait their turn")
    max_batch_size: int = Field(16, gt=0, le=1024, description="observations per batched forward pass")
    batch_wait_timeout_s: float = Field(0.0, ge=0, le=1.0, description="how long a forward pass waits for company")
    tenants: str | None = Field(
        None, max_length=1024 * 1024,
        description="a tenants file's YAML text (docs/tenants.md; `deepshare serve --tenants FILE` reads FILE): the "
        "policy decides behind its queues' admission; None = no tenancy",
    )

    @field_validator("tenants")
    @classmethod
    def _tenants_parse(cls, text: str | None) -> str | None:
        if text is not None:
            try:
                parse_tenants_text(text)
            except DeepShareError as exc:
                raise ValueError(str(exc)) from None
        return text

    def parsed_tenants(self) -> Tenants | None:
        """:attr:`tenants` parsed (:class:`~deepshare.tenants.Tenants`), or None."""
        return None if self.tenants is None else parse_tenants_text(self.tenants)


def parse_tenants_text(text: str, source: str = "tenants") -> Tenants:
    from deepshare.tenants import parse_tenants

    return parse_tenants(text, source)


def check_settings(settings: ServiceSettings) -> None:
    """Load the policy and the contention model once: unknown names and unreadable checkpoints
    fail here (:class:`DeepShareError`), before anything starts (``deepshare serve``, and a Serve
    config's application build)."""
    from deepshare.core.contention import make_contention
    from deepshare.policies import make_policy

    make_policy(settings.policy)
    make_contention(settings.contention)
