"""PlacementClient against answers a DeepShare service does not send: an error body of another
shape (a proxy's, an older service's) stays the client's error of its status (a 503 unavailable,
with its Retry-After), an unreadable body is one error, and an answer that is not one decision per
pending job, in request order, or places a job nowhere, is an unexpected answer, never a partial
decision."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from serving_cases import small_request

from deepshare.core.contention import make_contention
from deepshare.core.workloads import default_catalog
from deepshare.serving.client import (
    PlacementClient, PlacementServiceError, PlacementServiceUnavailable, UnexpectedPlacementAnswer,
)
from deepshare.serving.schemas import PlacementRequest, PlacementResponse
from deepshare.serving.translate import UnexpectedAnswer, request_to_view, response_to_decision


class _Canned(BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"{}")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length", 0)))
        status, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Retry-After", "7")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[tuple[ThreadingHTTPServer, PlacementClient]]:
    """A loopback server answering every POST with its ``answer`` (status, body), and a client of it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, PlacementClient(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=30)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


REQUEST = PlacementRequest.model_validate(small_request())


@pytest.mark.parametrize("status, detail, words", [
    (503, ["upstream connect error"], "HTTP 503: upstream connect error"),
    (503, [{"loc": 5, "msg": "bad"}], "HTTP 503: bad"),
    (503, {"reason": "busy"}, 'HTTP 503: {"detail"'),
    (503, [[[["deep"]]]], 'HTTP 503: [[["deep"]]]'),
])
def test_an_unavailable_answer_of_any_shape_stays_unavailable_with_its_retry_after(service, status, detail, words):
    server, client = service
    server.answer = (status, json.dumps({"detail": detail}).encode())
    with pytest.raises(PlacementServiceUnavailable) as caught:
        client.place(REQUEST)
    assert caught.value.status == 503 and caught.value.retry_after_s == 7.0
    assert words in str(caught.value)


@pytest.mark.parametrize("entry, words", [
    ({"loc": None, "msg": "bad"}, "HTTP 422: bad"),
    ({"loc": ["body", {"x": 1}, 0], "msg": 3}, 'HTTP 422: body.0: {"loc"'),
    ("just text", "HTTP 422: just text"),
])
def test_a_refusal_of_another_shape_is_a_service_error_quoting_it(service, entry, words):
    server, client = service
    server.answer = (422, json.dumps({"detail": [entry]}).encode())
    with pytest.raises(PlacementServiceError) as caught:
        client.place(REQUEST)
    assert type(caught.value) is PlacementServiceError and caught.value.status == 422
    assert words in str(caught.value)


def test_an_error_body_nested_past_the_parser_is_quoted_raw_and_stays_unavailable(service):
    server, client = service
    server.answer = (503, b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(PlacementServiceUnavailable, match=r"HTTP 503: \[\[\[") as caught:
        client.place(REQUEST)
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b"<html>ok</html>"])
def test_a_200_that_is_not_json_is_an_unexpected_answer(service, body):
    """A service fault like any other unexpected answer: the live scheduler searches no job for it."""
    server, client = service
    server.answer = (200, body)
    with pytest.raises(UnexpectedPlacementAnswer, match="unexpected answer: not JSON this client can read"):
        client.place(REQUEST)


def _answer(*decisions: dict) -> dict:
    return {"decisions": list(decisions), "policy": "x", "policy_version": "y"}


WAITS = [{"job_id": f"p{i}", "action": "wait"} for i in range(3)]
BROKEN = {
    "place without a placement": (_answer({"job_id": "p0", "action": "place"}, *WAITS[1:]),
                                  "decisions.0.placement: a 'place' of 'p0' without a placement"),
    "place at nowhere": (_answer(*WAITS[:2], {"job_id": "p2", "action": "place", "placement": {}}),
                         "decisions.2.placement: a 'place' of 'p2' without a placement"),
    "wait with a placement": (_answer({"job_id": "p0", "action": "wait", "placement": {"n1": 2}}, *WAITS[1:]),
                              "decisions.0.placement: a 'wait' of 'p0' with a placement"),
    "no decisions": (_answer(), "decisions.0: nothing where the request's pending jobs need 'p0'"),
    "an unknown job": (_answer({"job_id": "nope", "action": "wait"}, *WAITS[1:]),
                       "decisions.0: 'nope' where the request's pending jobs need 'p0'"),
    "a job missing": (_answer(*WAITS[:2]), "3 asked, 2 answered"),
    "a job twice": (_answer(*WAITS, WAITS[2]), "decisions.3: 'p2' where the request's pending jobs need no more"),
    "out of order": (_answer(WAITS[1], WAITS[0], WAITS[2]), "decisions.0: 'p1' where"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_an_answer_that_breaks_the_contract_is_no_decision(case):
    answer, words = BROKEN[case]
    view = request_to_view(REQUEST, default_catalog(), make_contention("profiled"))
    with pytest.raises(UnexpectedAnswer) as caught:
        response_to_decision(PlacementResponse.model_validate(answer), view)
    assert words in str(caught.value)


def test_the_client_says_a_broken_answer_is_unexpected_and_reads_a_whole_one(service):
    server, client = service
    view = request_to_view(REQUEST, default_catalog(), make_contention("profiled"))
    server.answer = (200, json.dumps(BROKEN["place without a placement"][0]).encode())
    with pytest.raises(PlacementServiceError, match="/v1/placements: unexpected answer: decisions.0.placement"):
        client.decide(view)
    placed = {"job_id": "p0", "action": "place", "placement": {"n1": 2}}
    server.answer = (200, json.dumps(_answer(placed, *WAITS[1:])).encode())
    [launch] = client.decide(view).launch
    assert launch.job_id == "p0" and launch.placement.total_gpus == 2


@pytest.mark.parametrize("status, kind", [
    (404, PlacementServiceUnavailable), (405, PlacementServiceUnavailable), (409, PlacementServiceUnavailable),
    (501, PlacementServiceUnavailable),  # the service's or its proxy's: a 404 while Serve redeploys
    (400, PlacementServiceError), (413, PlacementServiceError), (422, PlacementServiceError),
    ((500, "policy"), PlacementServiceError),  # about the request: the live scheduler searches the jobs for a culprit
    ((500, "infeasible"), UnexpectedPlacementAnswer),  # the policy's fault
    (500, PlacementServiceUnavailable),  # a 500 not this service's: a Serve replica that died mid-request
    (302, UnexpectedPlacementAnswer),  # a redirect is never followed (the token would go with it)
])
def test_only_statuses_about_the_request_blame_it(service, status, kind):
    """A service restart answered 404 to the live scheduler's culprit probes: the jobs probed then
    were isolated as if their data were at fault."""
    server, client = service
    status, error = status if isinstance(status, tuple) else (status, None)
    server.answer = (status, json.dumps({"detail": "x", **({"error": error} if error else {})}).encode())
    with pytest.raises(PlacementServiceError) as caught:
        client.place(REQUEST)
    assert type(caught.value) is kind


def test_an_error_detail_cannot_forge_log_lines(service):
    server, client = service
    server.answer = (422, json.dumps({"detail": "bad\nFAKE LOG LINE: job j1 isolated\r\n\x1b[31mred"}).encode())
    with pytest.raises(PlacementServiceError) as caught:
        client.place(REQUEST)
    text = str(caught.value)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and "bad\\nFAKE LOG LINE" in text


@pytest.mark.parametrize("url, words", [
    ("http://admin:hunter2@127.0.0.1:9", "credentials in the URL are not sent"),
    ("http://127.0.0.1:9/ok?x=1", "expected no query or fragment"),
    ("http://127.0.0.1:9/ok#frag", "expected no query or fragment"),
    ("http://127.0.0.1:9/a b", "expected printable ASCII without spaces"),
    ("http://127.0.0.1:9/ü", "expected printable ASCII without spaces"),
    ("http://127.0.0.1:9/deepshare\n", "expected printable ASCII without spaces"),  # urlsplit drops it unseen
    # a password that moves the parser's split, or a URL the parser refuses: no piece of it quoted
    ("http://admin:hunter2#x@placement:8000", "credentials in the URL are not sent"),
    ("http://admin:hunter2@host:abc", "credentials in the URL are not sent"),
    ("ftp://admin:hunter2@host", "credentials in the URL are not sent"),
    ("http://admin:hunter2@[::1", "credentials in the URL are not sent"),
])
def test_a_base_url_the_api_cannot_use_is_refused_when_given_without_quoting_credentials(url, words):
    with pytest.raises(PlacementServiceError, match=words) as caught:
        PlacementClient(url)
    assert "hunter2" not in str(caught.value) and "admin" not in str(caught.value)


def test_a_token_no_header_can_carry_is_refused_without_echoing_it_and_an_empty_one_is_none():
    with pytest.raises(PlacementServiceError) as caught:
        PlacementClient("http://127.0.0.1:9", token="my-secret-value\n")
    assert "my-secret-value" not in str(caught.value) and "placement service token" in str(caught.value)
    assert PlacementClient("http://127.0.0.1:9", token="")._auth == {}  # as the service reads an empty token


@pytest.mark.parametrize("url", ["http://[::1]:8000", "http://host/deepshare/", "https://host:8443/a%20b", "HTTP://host"])
def test_urls_the_api_can_use_are_taken(url):
    assert PlacementClient(url).url == url.rstrip("/")
