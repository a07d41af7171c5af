"""A placement request naming a key twice in one object is a 422 naming the key's path, at any
depth: pydantic's parser kept the last value without a word, and a proxy in front that keeps
the first would read another request from the same bytes."""

from __future__ import annotations

import json

import pytest
from serving_cases import small_request
from test_serving_api import api, post

from deepshare.serving.duplicates import duplicate_keys


def _twice(body: dict, key: str) -> bytes:
    """``body`` as JSON with its top-level ``key`` written twice (the same value both times)."""
    text = json.dumps(body)
    first = json.dumps({key: body[key]})[1:-1]
    return (text[:-1] + ", " + first + "}").encode()


def test_a_top_level_key_twice_is_a_422_naming_it():
    status, answer = post(api().app, _twice(small_request(), "nodes"))
    assert status == 422
    assert answer["detail"] == [{"loc": ["body", "nodes"], "type": "duplicate_key",
                                 "msg": "duplicate key 'nodes': an object names each key once (parsers differ on "
                                        "which value they keep)"}]


def test_a_nested_key_twice_is_named_with_its_path_and_every_one_is_listed():
    text = json.dumps(small_request())
    text = text.replace('"job_id": "p1",', '"job_id": "p1", "gpus": 1,', 1)  # pending[1] names gpus twice
    text = text.replace('"n0": 4}', '"n0": 4, "n0": 2}', 1)  # running[0].placement names n0 twice
    status, answer = post(api().app, text.encode())
    assert status == 422
    assert [e["loc"] for e in answer["detail"]] == [["body", "running", 0, "placement", "n0"],
                                                    ["body", "pending", 1, "gpus"]]


def test_the_same_body_without_duplicates_is_decided():
    assert post(api().app, small_request())[0] == 200


@pytest.mark.parametrize("raw", [b'{"now": 1, "now": 2', b'\xff{"now": 1, "now": 2}',
                                 b'{"now": 1, "now": 2, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                 b'{"now": 1, "now": 2, "x": 1' + b"0" * 4400 + b"}",
                                 # a duplicate inside a closed object, then what the decoder cannot read: the first
                                 # pass stops at the duplicate, the second reads on to it
                                 b'{"x": {"a": 1, "a": 2}, "y": tru}', b'{"a": 1, "a": 2} trailing',
                                 b'{"x": {"a": 1, "a": 2}, "y": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                 b'{"x": {"a": 1, "a": 2}, "y": 1' + b"9" * 4400 + b"}"])
def test_what_the_decoder_cannot_read_is_left_to_pydantic_which_refuses_it_as_not_json(raw):
    assert duplicate_keys(raw) == []
    status, answer = post(api().app, raw)
    assert status == 400 and answer["detail"][0]["type"] == "json_invalid"


def test_a_key_named_three_times_is_one_error():
    assert [e.loc for e in duplicate_keys(b'{"a": {"k": 1, "k": 2, "k": 3}, "b": [{"k": 1}, {"k": 2}]}')] == [
        ("body", "a", "k")]
