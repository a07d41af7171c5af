"""A Python client of the placement service (``deepshare serve``).

``PlacementClient(url).place(request)`` sends a :class:`PlacementRequest` and returns the
:class:`PlacementResponse`; ``decide(view)`` makes the service a drop-in :class:`Policy`: it
sends a :class:`ClusterView` and returns the checked :class:`Decision`, so the simulator or the
live scheduler can run a policy that lives behind HTTP. Errors the service reports (4xx with a
field path) and transport failures raise :class:`PlacementServiceError`.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import requests
from pydantic import ValidationError

from deepshare.core.errors import DeepShareError
from deepshare.core.types import Decision, WAIT
from deepshare.core.view import ClusterView
from deepshare.serving.schemas import HealthOut, PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.settings import TOKEN_ENV as SERVE_TOKEN_ENV
from deepshare.serving.translate import response_to_decision, view_to_request

__all__ = ["SERVE_TOKEN_ENV", "PlacementClient", "PlacementServiceError"]


class PlacementServiceError(DeepShareError):
    """The service refused a request (``status`` is its HTTP code) or could not be reached.

    ``retry_after_s`` is set from a 503's ``Retry-After`` (no decision within the service's
    deadline: retry later, or send a smaller request)."""

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class PlacementClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._name: str | None = None

    @property
    def name(self) -> str:
        """The served policy's name (asked once)."""
        if self._name is None:
            self._name = self.policy().name
        return self._name

    def health(self) -> HealthOut:
        return HealthOut.model_validate(self._call("GET", "/healthz"))

    def wait_ready(self, timeout_s: float = 120.0, alive: Callable[[], bool] = lambda: True) -> None:
        """Poll ``/healthz`` until it answers 200 (a starting service refuses or stalls first);
        give up after ``timeout_s`` or as soon as ``alive()`` turns false (its process died)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._session.get(self.url + "/healthz", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if not alive():
                raise PlacementServiceError(f"{self.url}: the service exited before it was ready")
            if time.monotonic() > deadline:
                raise PlacementServiceError(f"{self.url}: not ready after {timeout_s:g} s")
            time.sleep(0.5)

    def policy(self) -> PolicyOut:
        return PolicyOut.model_validate(self._call("GET", "/v1/policy"))

    def place(self, request: PlacementRequest) -> PlacementResponse:
        body = request.model_dump_json(exclude_defaults=True)
        answer = self._call("POST", "/v1/placements", body)
        try:
            return PlacementResponse.model_validate(answer)
        except ValidationError as exc:
            raise PlacementServiceError(f"{self.url}/v1/placements: unexpected answer ({exc.error_count()} errors)") from None

    def decide(self, view: ClusterView) -> Decision:
        """The served policy's decision for ``view`` (the :class:`Policy` protocol)."""
        if not view.queued:
            return WAIT
        return response_to_decision(self.place(view_to_request(view)), view)

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "PlacementClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: str | None = None) -> Any:
        try:
            reply = self._session.request(
                method, self.url + path, data=body, timeout=self.timeout_s,
                headers={"Content-Type": "application/json"} if body is not None else None,
            )
        except requests.RequestException as exc:
            raise PlacementServiceError(f"{self.url}{path}: cannot reach the placement service ({exc})") from None
        if reply.status_code >= 400:
            raise PlacementServiceError(
                f"{self.url}{path}: HTTP {reply.status_code}: {_detail(reply)}", reply.status_code,
                _seconds(reply.headers.get("Retry-After")),
            )
        try:
            return reply.json()
        except ValueError:
            raise PlacementServiceError(f"{self.url}{path}: the answer is not JSON") from None


def _detail(reply: requests.Response) -> str:
    try:
        detail = reply.json().get("detail")
    except (ValueError, AttributeError):
        return reply.text[:200]
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in detail)
    return str(detail)



def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (the service sends delta-seconds), else ``None``."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
