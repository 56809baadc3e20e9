"""``POST /api/v1/evaluate`` declares its 200 bodies: real responses of each form, over the
scripted engine, validate against ``EvaluateResponse`` / ``EvaluateBatchResponse`` (which forbid
undeclared fields) and dump back to the very JSON the route sent; the OpenAPI schema names both."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ValidationError
from server_helpers import QUESTION, RAG

from logitjudge.contract.evaluate import EvaluateBatchResponse, EvaluateResponse
from logitjudge.rubrics.debias import MIN_BATCH

URL = "/api/v1/evaluate"


def _post(client: TestClient, body: dict[str, Any]) -> Any:
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _round_trip(model: type[BaseModel], sent: Any) -> BaseModel:
    """``sent`` validates against ``model`` and dumps back to itself (the route leaves per-item
    ``null`` fields out; the summary keeps its ``null`` metrics)."""
    parsed = model.model_validate(sent)
    dumped = parsed.model_dump(mode="json", exclude_unset=True)
    assert json.dumps(dumped, sort_keys=True) == json.dumps(sent, sort_keys=True)
    return parsed


@pytest.mark.parametrize(
    "body",
    [
        {"evaluators": ["Everything"], **RAG},
        {"evaluators": ["RAG"], "output": "no context, no input: every RAG evaluator is skipped"},
        {"evaluators": ["typed_question"], "input": "money back please", "question": QUESTION, "id": 7},
    ],
    ids=["everything", "all-skipped", "typed-with-id"],
)
def test_a_flat_response_is_an_evaluate_response(client: TestClient, body: dict[str, Any]) -> None:
    sent = _post(client, body)
    parsed = _round_trip(EvaluateResponse, sent)
    assert isinstance(parsed, EvaluateResponse) and parsed.model == "scripted-1"
    with pytest.raises(ValidationError):
        EvaluateBatchResponse.model_validate(sent)


def test_the_all_skipped_item_leaves_passed_out(client: TestClient) -> None:
    sent = _post(client, {"evaluators": ["RAG"], "output": "o"})
    assert "passed" not in sent and "id" not in sent  # null fields are left out: the model allows it
    assert EvaluateResponse.model_validate(sent).passed is None


TYPED_ITEMS = [
    {"id": f"t{i}", "input": "money back please" if i % 3 == 0 else "where is my parcel", "question": QUESTION}
    for i in range(MIN_BATCH + 1)
]
RAG_ITEMS = [{"id": "rag", **RAG, "labels": {"faithfulness": True}}, {"output": "no id, every evaluator skipped"}]


@pytest.mark.parametrize(
    "body",
    [
        {"evaluators": ["RAG"], "items": RAG_ITEMS},
        {"evaluators": ["typed_question"], "items": TYPED_ITEMS},
        {"evaluators": ["typed_question"], "items": TYPED_ITEMS, "x_debias": "batch"},
    ],
    ids=["rag-with-a-skipped-item", "typed", "typed-debiased"],
)
def test_a_batch_response_is_an_evaluate_batch_response(client: TestClient, body: dict[str, Any]) -> None:
    sent = _post(client, body)
    parsed = _round_trip(EvaluateBatchResponse, sent)
    assert isinstance(parsed, EvaluateBatchResponse) and len(parsed.results) == len(body["items"])
    assert ("x_debias" in sent) == ("x_debias" in body)
    with pytest.raises(ValidationError):
        EvaluateResponse.model_validate(sent)


def test_the_openapi_schema_declares_both_forms(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ok = spec["paths"]["/api/v1/evaluate"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    refs = {s["$ref"].rsplit("/", 1)[1] for s in ok["anyOf"]}
    assert refs == {"EvaluateResponse", "EvaluateBatchResponse"}
    schemas = spec["components"]["schemas"]
    assert {"model", "results", "usage"} <= set(schemas["EvaluateResponse"]["required"])
    assert set(schemas["EvaluateBatchResponse"]["required"]) == {"model", "results", "summary", "usage"}
    assert schemas["EvaluateResponse"]["additionalProperties"] is False
