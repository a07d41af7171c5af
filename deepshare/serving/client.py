"""A Python client of the placement service (``deepshare serve``).

``PlacementClient(url).place(request)`` sends a :class:`PlacementRequest` and returns the
:class:`PlacementResponse`; ``decide(view)`` makes the service a drop-in :class:`Policy`: it
sends a :class:`ClusterView` and returns the checked :class:`Decision`, so the simulator or the
live scheduler can run a policy that lives behind HTTP. Errors the service reports (4xx with a
field path) and transport failures raise :class:`PlacementServiceError`.

A request's whole exchange is bounded (:func:`deepshare.infra.boundedhttp.exchange`), not each
socket operation: ``timeout_s`` at most, or the time the caller's decision has left
(:func:`deepshare.core.interrupt.time_left`: the live scheduler's ``--decision-timeout``) when
that is less, in which case running out raises the caller's
:class:`~deepshare.core.deadline.DecisionTimeout`. An answer larger than ``max_answer_bytes`` is
refused unread. A service that drips its answer or sends gigabytes cannot hold or exhaust the
scheduler that asks it.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from deepshare.core.errors import DeepShareError, InfeasibleDecision, Unavailable, one_line
from deepshare.core.interrupt import checkpoint, time_left
from deepshare.core.types import Decision, WAIT
from deepshare.core.view import ClusterView
from deepshare.infra.boundedhttp import MAX_ANSWER_BYTES, Answer, ExchangeError, exchange, split_url
from deepshare.infra.httpauth import check_token
from deepshare.serving.schemas import HealthOut, PlacementRequest, PlacementResponse, PolicyOut
from deepshare.serving.settings import TOKEN_ENV as SERVE_TOKEN_ENV
from deepshare.serving.translate import UnexpectedAnswer, response_to_decision, view_to_request

__all__ = ["SERVE_TOKEN_ENV", "PlacementClient", "PlacementServiceError", "PlacementServiceUnavailable", "UnexpectedPlacementAnswer"]


class PlacementServiceError(DeepShareError):
    """The service refused a request (``status`` is its HTTP code) or could not be reached.

    ``retry_after_s`` is set from a 503's ``Retry-After`` (no decision within the service's
    deadline: retry later, or send a smaller request)."""

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


_Answer = TypeVar("_Answer", bound=BaseModel)

DEFAULT_TIMEOUT_S = 10.0
"""Seconds one request may take, sending, deciding and answering (the service's own decision
deadline is 5 s by default)."""


class PlacementServiceUnavailable(PlacementServiceError, Unavailable):
    """The service did not answer the question: unreachable, cut off, out of time, or it refused
    for a reason that is not in the request (401/403: the caller's token; 404: Serve's proxy while
    the application is deleted or redeployed; 408: the body came too slowly; 429, 502, 503, 504:
    overloaded or out of time; any other status but :data:`DATA_STATUSES`). The same request may
    succeed later."""


DATA_STATUSES = frozenset({400, 413, 422})
"""The statuses this service answers about the request itself (bad JSON, too large, a field out
of range), and a 500 whose body says the policy failed on it (``"error": "policy"``): a
:class:`PlacementServiceError`, which the live scheduler treats as a job's data at fault and
searches the jobs for. A 500 saying ``"infeasible"`` is the policy's fault (an
:class:`UnexpectedPlacementAnswer`); every other error status is the service's or its proxy's
(a 404 while Serve redeploys, a 500 from a replica that died mid-request): searching the jobs on
it had isolated jobs that did nothing wrong."""


class UnexpectedPlacementAnswer(PlacementServiceError, InfeasibleDecision):
    """The service answered, but not with a decision for the request: a body that is not a
    placement response, or not one decision per pending job in request order. The service is at
    fault, not a job: the live scheduler fails the tick without searching the jobs for a culprit
    (a search would spend up to its whole probe budget on a service that answers every probe so)."""


class PlacementClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        shown = one_line(_redacted(url))  # a URL quoted in an error never shows a password
        if not all(33 <= ord(c) < 127 for c in url):  # urlsplit drops tabs and line breaks unseen
            raise PlacementServiceError(f"placement service URL {shown!r}: expected printable ASCII without spaces "
                                        "(percent-encode the path)")
        try:
            split_url(self.url)
        except ExchangeError as exc:  # a bad URL is the caller's, said when it is given
            # the parser's words may quote a piece of a password ("port ... as 's3cr'"): not then
            why = "credentials in the URL are not sent, and it is not a URL either" if "@" in url else str(exc)
            raise PlacementServiceError(f"placement service URL {shown!r}: {why}") from None
        problem = _url_problem(self.url)
        if problem:
            raise PlacementServiceError(f"placement service URL {shown!r}: {problem}")
        if token:  # empty: no token, as the service's own setting reads it
            try:
                check_token(token, "placement service token")  # never echoed: a bad one was, by the header error
            except DeepShareError as exc:
                raise PlacementServiceError(str(exc)) from None
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._name: str | None = None

    @property
    def name(self) -> str:
        """The served policy's name (asked once)."""
        if self._name is None:
            self._name = self.policy().name
        return self._name

    def health(self) -> HealthOut:
        return self._answer(HealthOut, "/healthz", self._call("GET", "/healthz"))

    def wait_ready(self, timeout_s: float = 120.0, alive: Callable[[], bool] = lambda: True) -> None:
        """Poll ``/healthz`` until it answers 200 (a starting service refuses or stalls first);
        give up after ``timeout_s`` or as soon as ``alive()`` turns false (its process died)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if exchange(self.url + "/healthz", "GET", seconds=5.0, max_bytes=self.max_answer_bytes).status == 200:
                    return
            except ExchangeError:
                pass
            if not alive():
                raise PlacementServiceError(f"{self.url}: the service exited before it was ready")
            if time.monotonic() > deadline:
                raise PlacementServiceError(f"{self.url}: not ready after {timeout_s:g} s")
            time.sleep(0.5)

    def policy(self) -> PolicyOut:
        return self._answer(PolicyOut, "/v1/policy", self._call("GET", "/v1/policy"))

    def place(self, request: PlacementRequest) -> PlacementResponse:
        body = request.model_dump_json(exclude_defaults=True)
        return self._answer(PlacementResponse, "/v1/placements", self._call("POST", "/v1/placements", body))

    def decide(self, view: ClusterView) -> Decision:
        """The served policy's decision for ``view`` (the :class:`Policy` protocol); an answer that
        is not one decision per pending job, in request order, or places a job nowhere, is a
        :class:`UnexpectedPlacementAnswer`, never a partial decision."""
        if not view.queued:
            return WAIT
        response = self.place(view_to_request(view))
        try:
            return response_to_decision(response, view)
        except UnexpectedAnswer as exc:
            raise UnexpectedPlacementAnswer(f"{self.url}/v1/placements: unexpected answer: {exc}; is this a DeepShare "
                                            "placement service of this version?") from None

    def _answer(self, model: type[_Answer], path: str, doc: Any) -> _Answer:
        """``doc`` as ``model``, or one line naming the first field the service got wrong."""
        try:
            return model.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first.get("loc", ()))) or "the answer"
            where = where.encode("unicode_escape").decode("ascii")[:200]  # a key the service made up: one short line
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise UnexpectedPlacementAnswer(f"{self.url}{path}: unexpected answer: {where}: {first.get('msg', '')}{more}; "
                                            "is this a DeepShare placement service of this version?") from None

    def close(self) -> None:
        """Nothing to release: each request opens and closes its own connection."""

    def __enter__(self) -> "PlacementClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: str | None = None) -> Any:
        seconds, callers = self.timeout_s, False
        left = time_left()
        if left is not None and left < seconds:
            seconds, callers = left, True
        headers = dict(self._auth)
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            reply = exchange(self.url + path, method, None if body is None else body.encode(), headers, seconds,
                             self.max_answer_bytes)
        except ExchangeError as exc:
            if exc.timed_out and callers:
                checkpoint()  # the caller's decision is out of time: its own timeout, not a service error
            reason = f"cannot reach the placement service ({exc})" if exc.unreachable else f"placement service: {exc}"
            # too large an answer: the service's fault, not a job's (no culprit search)
            kind = PlacementServiceUnavailable if exc.unreachable or exc.timed_out else UnexpectedPlacementAnswer
            raise kind(f"{self.url}{path}: {reason}") from None
        if reply.status >= 400:
            kind = _error_kind(reply)
            raise kind(
                f"{self.url}{path}: HTTP {reply.status}: {one_line(_detail(reply))}", reply.status,  # no forged log lines
                _seconds(reply.headers.get("retry-after")),
            )
        if 300 <= reply.status < 400:  # never followed: the token would go where the redirect says
            raise UnexpectedPlacementAnswer(f"{self.url}{path}: HTTP {reply.status} redirects (not followed); give the "
                                            "placement service's own URL")
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError):  # RecursionError: brackets nested past the parser's depth
            raise UnexpectedPlacementAnswer(f"{self.url}{path}: unexpected answer: not JSON this client can read") from None


MAX_DETAIL_CHARS = 2000
"""The most of an error answer's ``detail`` a message quotes (a service may send megabytes)."""


def _error_kind(reply: Answer) -> type[PlacementServiceError]:
    """The error class of an error answer (:data:`DATA_STATUSES`)."""
    if reply.status in DATA_STATUSES:
        return PlacementServiceError
    if reply.status == 500:
        try:
            said = json.loads(reply.body)
        except (ValueError, RecursionError):
            said = None
        error = said.get("error") if isinstance(said, dict) else None
        if error == "policy":
            return PlacementServiceError
        if error == "infeasible":
            return UnexpectedPlacementAnswer
    return PlacementServiceUnavailable


def _url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as the service's base URL, or None: credentials (never sent,
    and quoted in every error message, logs and job records alike), a query or a fragment (the
    API's paths are appended to the URL: after a ``?`` or ``#`` they are no path). (A URL that is
    not printable ASCII, which failed every request as "cannot reach" for ever, is refused before.)"""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not sent (the service takes a bearer token: --placement-token)"
    if "?" in url or "#" in url:  # an empty query or fragment too: the paths would land after it
        return "expected no query or fragment (the API's paths are appended to it)"
    return None


def _redacted(url: str) -> str:
    """``url`` for an error message: anything between ``//`` and its last ``@`` (credentials,
    however they split the URL: a ``#`` or ``/`` in a password moves every parser's idea of where
    the host starts) replaced by ``***``. Never raises, whatever ``url`` holds."""
    start, at = url.find("//"), url.rfind("@")
    return url[:start + 2] + "***@" + url[at + 1:] if 0 <= start < at else url


def _detail(reply: Answer) -> str:
    """What an error answer says, in one bounded line: its ``detail`` as this service writes it (a
    text, or entries ``{"loc": [...], "msg": "..."}``), else the start of the raw body. Any other
    shape (a proxy's ``{"detail": ["upstream connect error"]}``, a ``loc`` that is no list) is
    quoted as it came: a message, never a crash, so a 503 stays an unavailable service."""
    raw = reply.body[:200].decode("utf-8", "replace")
    try:
        doc = json.loads(reply.body)
    except (ValueError, RecursionError):
        return raw
    detail = doc.get("detail") if isinstance(doc, dict) else None
    if isinstance(detail, str):
        return detail[:MAX_DETAIL_CHARS]
    if not isinstance(detail, list) or not detail:
        return raw
    try:
        return "; ".join(_entry(entry) for entry in detail[:100])[:MAX_DETAIL_CHARS]
    except RecursionError:  # an entry nested about as deep as the parser allows: too deep to write back
        return raw


def _entry(entry: object) -> str:
    """One ``detail`` entry as text: ``loc: msg`` for this service's shape, else the entry itself."""
    if isinstance(entry, dict):
        loc, msg = entry.get("loc"), entry.get("msg")
        where = ".".join(str(part) for part in loc if isinstance(part, (str, int))) if isinstance(loc, list) else ""
        text = msg if isinstance(msg, str) else json.dumps(entry)[:200]
        return f"{where}: {text}" if where else text
    return entry[:200] if isinstance(entry, str) else json.dumps(entry)[:200]


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (the service sends delta-seconds), else ``None`` (also for a
    negative, non-finite or more-than-a-day value: a hostile header cannot park the caller)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0.0 <= seconds <= 86400.0 else None
