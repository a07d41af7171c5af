"""What a placement service runs with: the policy and the limits of its HTTP front.

The same settings come from ``deepshare serve`` flags or from the ``args`` of a Serve config
(``serve/config.yaml``); bad values are refused with the field's name before anything starts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TOKEN_ENV = "DEEPSHARE_SERVE_TOKEN"


class ServiceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = Field("rl-hybrid", description="registry name, or NAME=CHECKPOINT for a learned policy")
    contention: str = Field("profiled", description="contention model behind the policy's predictions")
    token: str | None = Field(
        None, min_length=8,
        description=f"bearer token every route but /healthz requires; None = read ${TOKEN_ENV}, empty there = no token",
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0, description="larger request bodies get 413")
    max_batch_size: int = Field(16, gt=0, le=1024, description="observations per batched forward pass")
    batch_wait_timeout_s: float = Field(0.0, ge=0, le=1.0, description="how long a forward pass waits for company")
