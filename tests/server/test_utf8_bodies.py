"""JSON bodies are UTF-8 (RFC 8259 8.1): a body in UTF-16/32 (which json.loads would guess from a
byte-order mark) is the same 422 ``json_invalid`` at ``loc ["body"]`` as any unreadable body."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY
from support.scripted import ScriptedEngine

from logitjudge.judge import Judge
from logitjudge.server.app import create_app

EVALUATE = {"evaluators": ["faithfulness"], "output": "The sky is blue.", "context": ["The sky is blue."]}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Judge(ScriptedEngine()))) as c:
        yield c


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("path,body", [("/v1/systemone", BODY), ("/api/v1/evaluate", EVALUATE)])
def test_a_valid_request_in_another_encoding_is_refused(client, encoding, path, body):
    r = client.post(path, content=json.dumps(body).encode(encoding), headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    (entry,) = r.json()["detail"]
    assert entry["loc"] == ["body"] and entry["type"] == "json_invalid"
    assert "not valid UTF-8" in entry["msg"]


def test_the_same_request_in_utf8_is_answered(client):
    body = json.dumps(BODY).encode("utf-8")
    assert client.post("/v1/systemone", content=body, headers={"Content-Type": "application/json"}).status_code == 200
