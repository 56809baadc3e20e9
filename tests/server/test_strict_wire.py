"""The strict wire: ``--strict-wire`` / ``create_app(strict_wire=True)`` and the per-request
``x_strict_wire`` leave every ``x_`` extension field out of a response, at any depth, on both
APIs; without them the extensions are sent as before (the default is unchanged).

Regression: a harness that validates responses against a closed schema
(``additionalProperties: false``, krite-bench 0.1.0) rejected every choice and score answer for
its ``x_option_mass``, and no switch could turn the extensions off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY, QUESTION, RAG

from logitjudge import Judge
from logitjudge.contract.evaluate import EvaluateBatchResponse, EvaluateResponse
from logitjudge.contract.systemone import SystemOneResponse
from logitjudge.rubrics.debias import MIN_BATCH
from logitjudge.server.app import create_app

TYPED_ITEMS = [
    {"id": f"t{i}", "input": "money back please" if i % 3 == 0 else "where is my parcel", "question": QUESTION}
    for i in range(MIN_BATCH + 1)
]


def extension_keys(value: Any, path: str = "$") -> list[str]:
    """The path of every object key starting with ``x_``, at any depth."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, sub in value.items():
            if key.startswith("x_"):
                found.append(f"{path}.{key}")
            found += extension_keys(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            found += extension_keys(sub, f"{path}[{i}]")
    return found


def _drop(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if not k.startswith("x_")}


def _less(result: dict[str, Any]) -> dict[str, Any]:
    """An evaluator result less its declared extensions (its own, its chunks', its answer's)."""
    out = _drop(result)
    if "answer" in out:
        out["answer"] = _drop(out["answer"])
    if "details" in out:
        out["details"] = [_drop(d) for d in out["details"]]
    return out


@pytest.fixture
def strict_client(scripted_judge: Judge) -> Iterator[TestClient]:
    with TestClient(create_app(scripted_judge, strict_wire=True), raise_server_exceptions=False) as c:
        yield c


def _ok(client: TestClient, url: str, body: dict[str, Any]) -> Any:
    r = client.post(url, json=body)
    assert r.status_code == 200, r.text
    return r.json()


# -- POST /v1/systemone ---------------------------------------------------------------------------


def test_the_default_wire_carries_the_extensions(client: TestClient) -> None:
    data = _ok(client, "/v1/systemone", BODY)
    assert {"x_option_mass"} <= set(data["answers"]["team"]) and "x_option_mass" in data["answers"]["anger"]
    assert extension_keys(data)  # default unchanged: the extensions are sent
    assert client.get("/healthz").json()["strict_wire"] is False


def test_a_strict_server_sends_no_extension_field(strict_client: TestClient, client: TestClient) -> None:
    strict = _ok(strict_client, "/v1/systemone", BODY)
    assert extension_keys(strict) == []
    assert strict_client.get("/healthz").json()["strict_wire"] is True
    # the same answers, less the extensions: every contract field is kept
    full = _ok(client, "/v1/systemone", BODY)
    for qid, answer in full["answers"].items():
        assert strict["answers"][qid] == {k: v for k, v in answer.items() if not k.startswith("x_")}
    assert strict["model"] == full["model"] and strict["usage"] == full["usage"]
    assert set(strict["answers"]["team"]) == {"type", "choice", "probabilities", "confidence"}
    assert set(strict["answers"]["anger"]) == {"type", "score", "legend", "probabilities", "confidence"}
    assert set(strict["answers"]["refund"]) == {"type", "noul"}
    SystemOneResponse.model_validate(strict)


def test_the_request_switch_overrides_the_server_either_way(strict_client: TestClient, client: TestClient) -> None:
    assert extension_keys(_ok(client, "/v1/systemone", {**BODY, "x_strict_wire": True})) == []
    assert extension_keys(_ok(strict_client, "/v1/systemone", {**BODY, "x_strict_wire": False}))
    assert extension_keys(_ok(strict_client, "/v1/systemone", {**BODY, "x_strict_wire": None})) == []
    bad = client.post("/v1/systemone", json={**BODY, "x_strict_wire": "sometimes"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "x_strict_wire"]


def test_ids_options_and_legends_that_look_like_extensions_are_data(strict_client: TestClient) -> None:
    """Only declared ``x_`` fields are dropped: a question id, an option name or a structured
    level starting with ``x_`` is the client's data and comes back byte for byte."""
    body = {
        **BODY,
        "questions": {
            "x_y_z": {"type": "noul", "instructions": "Refund?"},
            "team": {"type": "choice", "criteria": {"x_small": None, "large": None}},
            "x_level": {"type": "score", "criteria": [{"x_label": "Calm"}, "Angry"]},
        },
    }
    data = _ok(strict_client, "/v1/systemone", body)
    assert list(data["answers"]) == ["x_y_z", "team", "x_level"]
    assert set(data["answers"]["x_y_z"]) == {"type", "noul"}
    assert list(data["answers"]["team"]["probabilities"]) == ["x_small", "large"]
    assert data["answers"]["x_level"]["legend"] == {"0": {"x_label": "Calm"}, "1": "Angry"}


def test_judge_ask_honours_the_request_switch(scripted_judge: Judge) -> None:
    assert extension_keys(scripted_judge.ask({**BODY, "x_strict_wire": True})) == []
    assert extension_keys(scripted_judge.ask(BODY))


# -- POST /api/v1/evaluate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"evaluators": ["Everything"], **RAG},
        {"evaluators": ["chunk_relevance@1"], **RAG},
        {"evaluators": ["typed_question"], "input": "money back please", "question": QUESTION},
        {"evaluators": ["typed_question"], "items": TYPED_ITEMS, "x_debias": "batch"},
        {"evaluators": ["RAG"], "items": [{"id": "rag", **RAG, "labels": {"faithfulness": True}}]},
    ],
    ids=["everything", "chunk-relevance-v1", "typed", "typed-batch-debiased", "rag-batch"],
)
def test_evaluate_on_the_strict_wire(strict_client: TestClient, client: TestClient, body: dict[str, Any]) -> None:
    full = _ok(client, "/api/v1/evaluate", body)
    assert extension_keys(full)  # each of these bodies has extensions on the default wire
    strict = _ok(strict_client, "/api/v1/evaluate", body)
    assert extension_keys(strict) == []
    assert extension_keys(_ok(client, "/api/v1/evaluate", {**body, "x_strict_wire": True})) == []
    model = EvaluateBatchResponse if "items" in body else EvaluateResponse
    model.model_validate(strict)  # still the declared body (extensions are optional there)
    items = [full] if "items" not in body else full["results"]
    strict_items = [strict] if "items" not in body else strict["results"]
    for item, strict_item in zip(items, strict_items, strict=True):  # the same verdicts, less the extensions
        assert strict_item["results"] == {name: _less(r) for name, r in item["results"].items()}


# -- the embedded 135M ----------------------------------------------------------------------------


def test_real_answers_on_the_strict_wire(default_judge: Judge) -> None:
    """The real engine's answers (with their real option mass) on both wires."""
    with TestClient(create_app(default_judge, strict_wire=True)) as c:
        strict = _ok(c, "/v1/systemone", BODY)
        full = _ok(c, "/v1/systemone", {**BODY, "x_strict_wire": False})
    assert extension_keys(strict) == []
    assert all("x_option_mass" in a for a in full["answers"].values())
    for qid, answer in full["answers"].items():
        assert strict["answers"][qid] == {k: v for k, v in answer.items() if not k.startswith("x_")}
