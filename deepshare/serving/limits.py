"""How much work one request may ask of a replica: node and job counts, checked before deciding.

The schema already caps every list (:data:`~deepshare.serving.schemas.MAX_NODES`, ...); these are
the operator's tighter limits (``--max-nodes``, ``--max-pending``, ``--max-running``). A request
over one is answered 413 naming the field, its count, the limit and the flag that sets it, before
any view is built; the decision deadline bounds what the admitted ones cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepshare.serving.schemas import PlacementRequest
from deepshare.serving.translate import FieldError, RequestError


class LimitExceeded(RequestError):
    """A request larger than this service admits (HTTP 413)."""


@dataclass(frozen=True)
class RequestLimits:
    max_nodes: int
    max_pending: int
    max_running: int

    def check(self, request: PlacementRequest) -> None:
        """Raise :class:`LimitExceeded` naming every list over its limit."""
        errors = [
            FieldError(("body", field), f"{count} {what} exceed this service's limit of {limit} ({flag})")
            for field, what, count, limit, flag in (
                ("nodes", "nodes", len(request.nodes), self.max_nodes, "--max-nodes"),
                ("pending", "pending jobs", len(request.pending), self.max_pending, "--max-pending"),
                ("running", "running jobs", len(request.running), self.max_running, "--max-running"),
            )
            if count > limit
        ]
        if errors:
            raise LimitExceeded(errors)
