"""A small client of the scheduler's HTTP API for the CLI (stdlib ``urllib``, no extra dependency).

Every failure a user can cause (no scheduler at the URL, a 4xx answer, a missing or wrong
token) raises :class:`~deepshare.core.errors.DeepShareError` with the server's one-line message.
The token goes in ``Authorization: Bearer``; bodies are ``application/json``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from deepshare.core.errors import DeepShareError
from deepshare.runtime.models import JobDetailOut, JobOut, LogOut
from deepshare.runtime.spec import LiveJobSpec


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
        self.token = token
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}"}
        if data:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error") or exc.reason
            except (ValueError, AttributeError):
                message = exc.reason
            if exc.code == 401:
                message = f"{message}; give --token, set $DEEPSHARE_SCHEDULER_TOKEN or --state DIR of the scheduler"
            raise DeepShareError(f"{self.url}: {message} (HTTP {exc.code})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DeepShareError(f"{self.origin}: no scheduler answers ({reason})") from None

    def submit(self, spec: LiveJobSpec) -> JobOut:
        return JobOut.model_validate(self._call("POST", "/v1/jobs", spec.model_dump(mode="json"))[1])

    def jobs(self) -> list[JobOut]:
        return [JobOut.model_validate(j) for j in self._call("GET", "/v1/jobs")[1]]

    def job(self, job_id: str) -> JobDetailOut:
        return JobDetailOut.model_validate(self._call("GET", f"/v1/jobs/{urllib.request.quote(job_id, safe='')}")[1])

    def cancel(self, job_id: str) -> tuple[int, JobOut]:
        status, body = self._call("DELETE", f"/v1/jobs/{urllib.request.quote(job_id, safe='')}")
        return status, JobOut.model_validate(body)

    def contention(self) -> dict[str, Any]:
        """The learned contention model's latest version (``GET /v1/contention``)."""
        body = self._call("GET", "/v1/contention")[1]
        if not isinstance(body, dict):
            raise DeepShareError(f"{self.url}: /v1/contention answered {type(body).__name__}, not an object")
        return body

    def logs(self, job_id: str, rank: int, offset: int) -> LogOut:
        query = urllib.parse.urlencode({"rank": rank, "offset": offset})
        return LogOut.model_validate(
            self._call("GET", f"/v1/jobs/{urllib.request.quote(job_id, safe='')}/logs?{query}")[1])
