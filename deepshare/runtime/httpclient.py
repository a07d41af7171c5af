"""A small client of the scheduler's HTTP API for the CLI, on ``requests`` (the project's one HTTP
client, as the placement service's :mod:`deepshare.serving.client`).

Every failure a user can cause (no scheduler at the URL, a 4xx answer, a missing or wrong
token) raises :class:`~deepshare.core.errors.DeepShareError` with the server's one-line message.
The token goes in ``Authorization: Bearer`` (as the session's ``auth``, so a ``~/.netrc`` entry
for the host cannot replace it); bodies are ``application/json``; an answer is read up to
:data:`MAX_ANSWER_BYTES`.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import requests
import urllib3

from deepshare.core.errors import DeepShareError
from deepshare.runtime.models import JobDetailOut, JobOut, LogOut
from deepshare.runtime.spec import LiveJobSpec


MAX_ANSWER_BYTES = 64 * 2**20
"""Largest answer read (a list of 10,000 jobs is a few MB): a server at a mistyped ``--url`` (or
one that is not a scheduler) cannot fill the client's memory, decompressed size counted."""


class BearerAuth(requests.auth.AuthBase):
    """``Authorization: Bearer TOKEN`` on every request of a session."""

    def __init__(self, token: str) -> None:
        self.header = f"Bearer {token}"

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = self.header
        return request


class SchedulerClient:
    """``origin`` says where ``url`` came from, for messages (default ``--url URL``; the CLI
    names the ``scheduler.json`` it read when the URL came from ``--state``)."""

    def __init__(self, url: str, token: str, timeout_s: float = 10.0, origin: str | None = None) -> None:
        self.origin = origin or f"--url {url}"
        expected = f"{self.origin}: expected http://HOST:PORT of a running scheduler, got {url!r}"
        if not url.startswith(("http://", "https://")):
            raise DeepShareError(expected)
        try:  # a broken IPv6 host or a port that is no number (1..65535) fails here, not in the request
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError:
            raise DeepShareError(expected) from None
        if not parts.hostname or port == 0:
            raise DeepShareError(expected)
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._session.auth = BearerAuth(token)

    def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        try:
            resp = self._session.request(method, self.url + path, json=body, params=params, timeout=self.timeout_s,
                                         stream=True)
            with resp:
                content = resp.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
        except (requests.RequestException, OSError, urllib3.exceptions.HTTPError) as exc:
            raise DeepShareError(f"{self.origin}: no scheduler answers ({_reason(exc)})") from None
        if len(content) > MAX_ANSWER_BYTES:
            raise DeepShareError(f"{self.url}: answered more than {MAX_ANSWER_BYTES:,} bytes; is this a DeepShare scheduler?")
        if resp.status_code >= 400:
            try:
                message = str(json.loads(content).get("error") or resp.reason)[:1000]
            except (ValueError, AttributeError, RecursionError):
                message = resp.reason
            if resp.status_code == 401:
                message = f"{message}; give --token, set $DEEPSHARE_SCHEDULER_TOKEN or --state DIR of the scheduler"
            raise DeepShareError(f"{self.url}: {message} (HTTP {resp.status_code})")
        try:
            return resp.status_code, json.loads(content) if content else None
        except (ValueError, RecursionError):
            raise DeepShareError(f"{self.url}: answered HTTP {resp.status_code} with a body that is not JSON; "
                                 "is this a DeepShare scheduler?") from None

    def submit(self, spec: LiveJobSpec) -> JobOut:
        return JobOut.model_validate(self._call("POST", "/v1/jobs", spec.model_dump(mode="json"))[1])

    def jobs(self, states: tuple[str, ...] = (), limit: int | None = None) -> list[JobOut]:
        """The ``limit`` most recently submitted jobs (the scheduler's default when None), of
        ``states`` (all when empty), in submission order."""
        params: dict[str, Any] = {"state": list(states)} if states else {}
        if limit is not None:
            params["limit"] = limit
        return [JobOut.model_validate(j) for j in self._call("GET", "/v1/jobs", params=params)[1]]

    def job(self, job_id: str) -> JobDetailOut:
        return JobDetailOut.model_validate(self._call("GET", f"/v1/jobs/{_segment(job_id)}")[1])

    def cancel(self, job_id: str) -> tuple[int, JobOut]:
        status, body = self._call("DELETE", f"/v1/jobs/{_segment(job_id)}")
        return status, JobOut.model_validate(body)

    def contention(self) -> dict[str, Any]:
        """The learned contention model's latest version (``GET /v1/contention``)."""
        body = self._call("GET", "/v1/contention")[1]
        if not isinstance(body, dict):
            raise DeepShareError(f"{self.url}: /v1/contention answered {type(body).__name__}, not an object")
        return body

    def queues(self) -> list[dict[str, Any]]:
        """Per-queue usage against quotas (``GET /v1/queues``): the caller's queues."""
        body = self._call("GET", "/v1/queues")[1]
        if not isinstance(body, list):
            raise DeepShareError(f"{self.url}: /v1/queues answered {type(body).__name__}, not a list")
        return body

    def reload_tenants(self) -> dict[str, Any]:
        """Re-read the scheduler's tenants file (``POST /v1/tenants/reload``; the admin token)."""
        body = self._call("POST", "/v1/tenants/reload", {})[1]
        if not isinstance(body, dict):
            raise DeepShareError(f"{self.url}: /v1/tenants/reload answered {type(body).__name__}, not an object")
        return body

    def logs(self, job_id: str, rank: int, offset: int) -> LogOut:
        return LogOut.model_validate(
            self._call("GET", f"/v1/jobs/{_segment(job_id)}/logs", params={"rank": rank, "offset": offset})[1])


def _segment(job_id: str) -> str:
    """``job_id`` as one path segment (a ``/`` or ``..`` in it cannot reach another route)."""
    return urllib.parse.quote(job_id, safe="")


def _reason(exc: BaseException) -> str:
    """Why a request failed, in a few words: the innermost OS error (``Connection refused``), else
    the exception's kind (``ReadTimeout``), never urllib3's nested retry message."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, requests.Timeout):
        return f"no answer in time: {type(exc).__name__}"
    return type(exc).__name__
