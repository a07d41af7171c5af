"""A small client of the scheduler's HTTP API for the CLI.

Every failure a user can cause (no scheduler at the URL, a 4xx answer, a missing or wrong
token, a server that answers too slowly or too much) raises
:class:`~deepshare.core.errors.DeepShareError` with the server's one-line message. Each request's
whole exchange has a deadline and its answer a size limit
(:func:`deepshare.infra.boundedhttp.exchange`, as the placement client's): a server at a mistyped
``--url`` that sends its answer a byte every few seconds, or without end, cannot hold the CLI or
fill its memory. The token goes in ``Authorization: Bearer`` (no ``~/.netrc`` is read); bodies
are ``application/json``; an answer is read up to
:data:`~deepshare.infra.boundedhttp.MAX_ANSWER_BYTES`, as by the placement client (no compressed
answer is asked for, and none is inflated). A redirect is not followed (the token would go where
the answer says): it is one line naming where it points.
No proxy is used (``$HTTP_PROXY`` and the like are not read), as for the placement client.
"""

from __future__ import annotations

import http
import json
import re
import urllib.parse
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from requests.utils import requote_uri

from deepshare.core.errors import DeepShareError, shown
from deepshare.infra.boundedhttp import MAX_ANSWER_BYTES, ExchangeError, exchange
from deepshare.runtime.models import ContentionOut, JobDetailOut, JobOut, LogOut, QueueOut
from deepshare.runtime.spec import LiveJobSpec


_Model = TypeVar("_Model", bound=BaseModel)


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
        self.url = requote_uri(url.rstrip("/"))  # a space or a non-ASCII letter in the path, percent-encoded
        self.timeout_s = timeout_s
        """Seconds one request may take, its whole exchange: connecting, sending and reading the answer."""
        self._authorization = f"Bearer {token}"

    def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = self.url + path + (f"?{urllib.parse.urlencode(params, doseq=True)}" if params else "")
        headers = {"Authorization": self._authorization, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            answer = exchange(url, method, data, headers, seconds=self.timeout_s, max_bytes=MAX_ANSWER_BYTES)
        except ExchangeError as exc:
            if exc.timed_out or exc.unreachable:
                raise DeepShareError(f"{self.origin}: no scheduler answers ({_reason(exc)})") from None
            raise DeepShareError(f"{self.url}: answered more than {MAX_ANSWER_BYTES:,} bytes; "
                                 "is this a DeepShare scheduler?") from None
        status, content = answer.status, answer.body
        if 300 <= status < 400:
            where = answer.headers.get("location")
            raise DeepShareError(f"{self.url}: answered HTTP {status}, a redirect "
                                 + (f"to {shown(where)}; give that URL as --url" if where else "to nowhere")
                                 + " (redirects are not followed: the token would go with them)")
        if status >= 400:
            reason = answer.reason.strip() or _phrase(status)
            try:
                message = str(json.loads(content).get("error") or reason)[:1000]
            except (ValueError, AttributeError, RecursionError):
                message = reason
            if status == 401:
                message = f"{message}; give --token, set $DEEPSHARE_SCHEDULER_TOKEN or --state DIR of the scheduler"
            raise DeepShareError(f"{self.url}: {message} (HTTP {status})" if message else f"{self.url}: answered HTTP {status}")
        try:
            return status, json.loads(content) if content else None
        except (ValueError, RecursionError):
            raise DeepShareError(f"{self.url}: answered HTTP {status} with a body that is not JSON; "
                                 "is this a DeepShare scheduler?") from None

    def submit(self, spec: LiveJobSpec) -> JobOut:
        return self._model(JobOut, "/v1/jobs", self._call("POST", "/v1/jobs", spec.model_dump(mode="json"))[1])

    def jobs(self, states: tuple[str, ...] = (), limit: int | None = None) -> list[JobOut]:
        """The ``limit`` most recently submitted jobs (the scheduler's default when None), of
        ``states`` (all when empty), in submission order."""
        params: dict[str, Any] = {"state": list(states)} if states else {}
        if limit is not None:
            params["limit"] = limit
        body = self._call("GET", "/v1/jobs", params=params)[1]
        if not isinstance(body, list):
            raise DeepShareError(f"{self.url}: /v1/jobs answered {type(body).__name__}, not a list")
        return [self._model(JobOut, "/v1/jobs", j) for j in body]

    def job(self, job_id: str) -> JobDetailOut:
        path = f"/v1/jobs/{_segment(job_id)}"
        return self._model(JobDetailOut, path, self._call("GET", path)[1])

    def cancel(self, job_id: str) -> tuple[int, JobOut]:
        path = f"/v1/jobs/{_segment(job_id)}"
        status, body = self._call("DELETE", path)
        return status, self._model(JobOut, path, body)

    def _model(self, model: type[_Model], path: str, body: Any) -> _Model:
        """``body`` as ``model``, or one line saying that the server's answer to ``path`` is not one."""
        try:
            return model.model_validate(body)
        except ValidationError:
            raise DeepShareError(f"{self.url}: {path} answered something that is not a {model.__name__} "
                                 f"({type(body).__name__}); is this a DeepShare scheduler?") from None

    def contention(self) -> dict[str, Any]:
        """The learned contention model's latest version (``GET /v1/contention``), as the server
        wrote it, once checked to be a :class:`ContentionOut` (what ``deepshare contention`` reads)."""
        body = self._call("GET", "/v1/contention")[1]
        if not isinstance(body, dict):
            raise DeepShareError(f"{self.url}: /v1/contention answered {type(body).__name__}, not an object")
        self._model(ContentionOut, "/v1/contention", body)
        return body

    def queues(self) -> list[dict[str, Any]]:
        """Per-queue usage against quotas (``GET /v1/queues``): the caller's queues, as the server
        wrote them, once checked to be :class:`QueueOut` rows."""
        body = self._call("GET", "/v1/queues")[1]
        if not isinstance(body, list):
            raise DeepShareError(f"{self.url}: /v1/queues answered {type(body).__name__}, not a list")
        for row in body:
            self._model(QueueOut, "/v1/queues", row)
        return body

    def reload_tenants(self) -> dict[str, Any]:
        """Re-read the scheduler's tenants file (``POST /v1/tenants/reload``; the admin token)."""
        body = self._call("POST", "/v1/tenants/reload", {})[1]
        if not isinstance(body, dict):
            raise DeepShareError(f"{self.url}: /v1/tenants/reload answered {type(body).__name__}, not an object")
        return body

    def logs(self, job_id: str, rank: int, offset: int, tail: int | None = None) -> LogOut:
        """Bytes of a rank's log from ``offset`` (negative: that many before the end), or, with
        ``tail``, from where its last ``tail`` lines start (``offset`` is then 0; a server that
        does not say it answered ``tail`` is older than it and an error). A chunk
        that says there is more (``next_offset`` below ``size``) or carries text must move past
        ``offset``, within ``0..size``: a reader asks again from ``next_offset``, and a chunk that
        stood still made ``deepshare logs`` ask (and print) for ever. A log that shrank below
        ``offset`` since it was read (truncated, rotated, removed) is an empty chunk at its new
        size, returned as such: the caller reads it again from the start."""
        path = f"/v1/jobs/{_segment(job_id)}/logs"
        params = {"rank": rank, **({"offset": offset} if tail is None else {"tail": tail})}
        chunk = self._model(LogOut, path, self._call("GET", path, params=params)[1])
        if tail is not None and chunk.tail != tail:  # it ignored tail: the chunk is the log's start
            raise DeepShareError(f"{self.url}: {path} answered no tail of the log (a scheduler older than "
                                 f"`deepshare logs --tail`?); upgrade it, or leave --tail out")
        if tail is not None and not 0 <= chunk.offset <= chunk.next_offset <= chunk.size:
            raise DeepShareError(f"{self.url}: {path} answered a tail starting at offset {chunk.offset} of a log of "
                                 f"{chunk.size} bytes (next_offset {chunk.next_offset}); is this a DeepShare scheduler?")
        if 0 <= chunk.size < offset and not chunk.text and chunk.next_offset == chunk.size:
            return chunk
        stuck = offset >= 0 and chunk.next_offset <= offset and (bool(chunk.text) or chunk.next_offset < chunk.size)
        if chunk.size < 0 or not 0 <= chunk.next_offset <= chunk.size or (offset >= 0 and chunk.next_offset < offset) or stuck:
            raise DeepShareError(f"{self.url}: {path} answered a log chunk that does not move on from offset {offset} "
                                 f"(next_offset {chunk.next_offset}, size {chunk.size}); is this a DeepShare scheduler?")
        return chunk


def _segment(job_id: str) -> str:
    """``job_id`` as one path segment (a ``/`` or ``..`` in it cannot reach another route)."""
    return urllib.parse.quote(job_id, safe="")


def _reason(exc: ExchangeError) -> str:
    """Why a request failed, in a few words: the OS's words where there are some (``Connection
    refused``), else the exchange's (``no complete answer within 10 s``)."""
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\] (.+)$", text)
    return found.group(1) if found else text


def _phrase(status: int) -> str:
    """The standard reason phrase of an HTTP status (``Internal Server Error``), or ``""``."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""
