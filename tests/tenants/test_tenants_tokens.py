"""The tenants file's ``tokens`` (the live scheduler's tenants): hashes only, errors naming the field."""

from __future__ import annotations

import hashlib

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.tenants import parse_tenants

QUEUES = "queues: [{name: a, nominal_gpus: 2}, {name: b, nominal_gpus: 2}]\n"
H1 = hashlib.sha256(b"token-one-0123").hexdigest()
H2 = hashlib.sha256(b"token-two-0123").hexdigest()


def test_tokens_keep_the_digest_and_the_queues():
    tenants = parse_tenants(QUEUES + f"tokens: [{{name: x, queues: [b, a, b], sha256: {H1.upper()}}}]\n")
    (token,) = tenants.tokens
    assert (token.name, token.queues, token.sha256) == ("x", ("b", "a"), bytes.fromhex(H1))
    assert H1 not in repr(token)  # not even the hash is shown
    assert parse_tenants(QUEUES).tokens == ()


@pytest.mark.parametrize("tokens, message", [
    (f"[{{name: x, queues: [a], sha256: {H1}}}, {{name: x, queues: [b], sha256: {H2}}}]", "tokens.1.name: tenant 'x' is declared twice"),
    (f"[{{name: x, queues: [a], sha256: {H1}}}, {{name: y, queues: [b], sha256: {H1}}}]", "tokens.1.sha256: the same token hash"),
    (f"[{{name: x, queues: [a, c], sha256: {H1}}}]", "tokens.0.queues.1: queue 'c' is not declared in queues"),
    (f"[{{name: x, queues: [], sha256: {H1}}}]", "tokens.0.queues: List should have at least 1 item"),
    ("[{name: x, queues: [a], sha256: abc}]", "tokens.0.sha256: String should match pattern"),
    ("[{name: x, queues: [a], token: secret-in-clear}]", "tokens.0.token: Extra inputs are not permitted"),
])
def test_bad_tokens_name_the_field(tokens, message):
    with pytest.raises(DeepShareError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_tenants(QUEUES + f"tokens: {tokens}\n", "t.yaml")
