"""How much work one request may ask of a replica: node and job counts, checked before deciding.

The schema already caps every list (:data:`~deepshare.serving.schemas.MAX_NODES`, ...); these are
the operator's tighter limits (``--max-nodes``, ``--max-pending``, ``--max-running``). A request
over one is answered 413 naming the field, its count, the limit and the flag that sets it, before
any view is built; the decision deadline bounds what the admitted ones cost. A list longer than
the schema's own cap (which is also the most the flag may be set to, and its default for nodes
and running jobs) gets the same 413, not the schema's 422, so the answer does not depend on which
of the two limits the list passed first.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

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
        counts = {"nodes": len(request.nodes), "pending": len(request.pending), "running": len(request.running)}
        errors = self._over(counts)
        if errors:
            raise LimitExceeded(errors)

    def over_schema(self, exc: ValidationError) -> LimitExceeded | None:
        """The request's lists that the schema refused as too long (``too_long`` at ``nodes``,
        ``pending`` or ``running``), as this service's :class:`LimitExceeded`; None when there
        are none (the body's other errors are then its answer)."""
        counts = {}
        for error in exc.errors(include_url=False, include_input=False):
            loc = error.get("loc", ())
            if error.get("type") == "too_long" and len(loc) == 1 and loc[0] in _LISTS:
                actual = (error.get("ctx") or {}).get("actual_length")
                if isinstance(actual, int):
                    counts[loc[0]] = actual
        errors = self._over(counts)
        return LimitExceeded(errors) if errors else None

    def _over(self, counts: dict[str, int]) -> list[FieldError]:
        """An error for each of ``counts`` (list name -> its length) over this service's limit,
        in the order of :data:`_LISTS`."""
        return [
            FieldError(("body", field), f"{counts[field]} {what} exceed this service's limit of {limit} ({flag})")
            for field, (what, attribute, flag) in _LISTS.items()
            if field in counts and counts[field] > (limit := getattr(self, attribute))
        ]


_LISTS = {
    "nodes": ("nodes", "max_nodes", "--max-nodes"),
    "pending": ("pending jobs", "max_pending", "--max-pending"),
    "running": ("running jobs", "max_running", "--max-running"),
}
"""The request's lists the service limits: what a count of them is called, the limit's attribute
and the flag that sets it."""
