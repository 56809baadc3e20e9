"""POST /api/v1/evaluate over HTTP: both forms, suites, skips, and the 422/400 error shapes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from support.scripted import ScriptedEngine

from logitjudge.judge import Judge
from logitjudge.server.app import create_app

URL = "/api/v1/evaluate"


def _script(state, q):
    ins = str(q.instructions)
    if q.type == "noul" and "context" not in state:  # faithfulness's contrast twin: an even prior
        return [0.5, 0.5]
    if q.type == "noul":
        return [0.9, 0.1] if "`context[0]`" in ins or "`context[3]`" in ins else [0.2, 0.8]
    return [1.0] * len(q.options)


@pytest.fixture
def client():
    judge = Judge(ScriptedEngine(_script))
    with TestClient(create_app(judge)) as c:
        c.engine = judge.engine
        yield c


def test_chunk_relevance_page_example_over_http(client):
    body = {
        "evaluators": ["chunk_relevance@1"],  # version 1: the page's own question, one request
        "input": "How is Jev priced, and are output tokens billed?",
        "output": "…",
        "context": [
            "Price: $42 per billion input tokens. Output tokens are free.",
            "Rate limits: 1,200 rpm.",
            "Founded in 2024.",
            "Output billed at $8/M on the legacy v0 endpoint, deprecated.",
        ],
    }
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model"] == "scripted"
    res = out["results"]["chunk_relevance"]
    assert res["score"] == 0.5 and res["label"] == "2/4 relevant" and res["passed"] is True
    assert [d["passed"] for d in res["details"]] == [True, False, False, True]
    assert out["passed"] is True
    assert out["usage"]["requests"] == 1
    assert sum(len(batch) for batch in client.engine.calls) == 1  # one engine request for the item


def test_unknown_evaluator_is_422_at_its_position_with_did_you_mean(client):
    r = client.post(URL, json={"evaluators": ["RAG", "chunk_relevence"], "input": "q", "context": ["c"]})
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "evaluators", 1]
    assert err["type"] == "value_error"
    assert "did you mean 'chunk_relevance'" in err["msg"]
    assert err["ctx"]["suggestions"][0] == "chunk_relevance"
    assert client.engine.calls == []


def test_explicit_evaluator_missing_field_is_422_naming_the_field(client):
    r = client.post(URL, json={"evaluators": ["faithfulness"], "output": "a"})
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "loc": ["body", "context"],
            "msg": "Field required: evaluator 'faithfulness' needs `context`",
            "type": "missing",
        }
    ]


def test_a_blank_required_field_is_422_saying_it_was_sent_blank(client):
    r = client.post(URL, json={"evaluators": ["faithfulness"], "output": " \u200b\n", "context": ["c"]})
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["loc"] == ["body", "output"] and err["type"] == "missing"
    assert err["msg"] == (
        "Field required: evaluator 'faithfulness' needs `output` "
        "(`output` sent blank: only whitespace or invisible characters)"
    )
    r = client.post(URL, json={"evaluators": ["faithfulness"], "output": "", "context": ["c"]})
    assert r.json()["detail"][0]["msg"].endswith("needs `output` (`output` sent empty)")
    r = client.post(URL, json={"evaluators": ["Correctness"], "input": "q", "output": "a", "expected": "  "})
    assert r.status_code == 200
    assert r.json()["results"]["answer_correctness"]["reason"] == (
        "missing required field `expected` (`expected` sent blank: only whitespace or invisible characters)"
    )
    (batch,) = client.engine.calls  # the other evaluators of the suite were asked; no state holds the blank
    assert all("expected" not in req.state for req in batch)


def test_missing_field_through_a_suite_is_skipped(client):
    r = client.post(URL, json={"evaluators": ["Correctness"], "input": "q", "output": "a"})
    assert r.status_code == 200
    res = r.json()["results"]
    assert list(res) == ["answer_correctness", "answer_relevancy", "task_completion", "conciseness"]
    assert res["answer_correctness"]["status"] == "skipped"
    assert res["answer_correctness"]["reason"] == "missing required field `expected`"
    assert "score" not in res["answer_correctness"]  # null fields are left out, never NaN
    assert res["conciseness"]["status"] == "ok"


def test_lower_case_suite_name_is_accepted(client):
    r = client.post(URL, json={"evaluators": ["correctness"], "input": "q", "output": "a"})
    assert r.status_code == 200 and "task_completion" in r.json()["results"]


def test_batch_form_with_summary_and_per_item_missing_field(client):
    body = {
        "evaluators": ["faithfulness", "RAG"],
        "items": [
            {"id": "a", "input": "q", "output": "o", "context": ["c"], "labels": {"faithfulness": False}},
            {
                "id": "b",
                "input": "q",
                "output": "o",
                "context": ["c", "d"],
                "labels": {"faithfulness": False},
            },
        ],
    }
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [x["id"] for x in out["results"]] == ["a", "b"]
    s = out["summary"]["faithfulness"]
    assert s["n"] == 2
    metrics = {m["name"]: m for m in s["metrics"]}
    assert metrics["pass_rate"]["value"] == 0.0  # scripted p(yes) = 0.2 < 0.5
    assert metrics["accuracy"]["value"] == 1.0
    assert metrics["precision"]["value"] is None and metrics["precision"]["reason"]
    # per item: its request, faithfulness's twin without context, each chunk alone and the null chunk
    # (chunk_relevance and chunk_support v2+); answer_relevancy v2's output alone and its content-free
    # output (one-sentence outputs: no sentence requests); context_entity_recall is skipped (no `expected`)
    assert out["usage"]["requests"] == 4 + 5 + 2 * 2

    body["items"].append({"id": "c", "input": "q"})
    r = client.post(URL, json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "items", 2, "output"]


def test_items_and_flat_fields_together_is_422(client):
    r = client.post(
        URL, json={"evaluators": ["faithfulness"], "output": "o", "items": [{"output": "o", "context": "c"}]}
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items"]


def test_evaluators_missing_or_empty_is_422(client):
    assert client.post(URL, json={"output": "o"}).json()["detail"][0]["loc"] == ["body", "evaluators"]
    assert client.post(URL, json={"evaluators": [], "output": "o"}).status_code == 422


def test_threshold_override_and_bad_thresholds(client):
    body = {
        "evaluators": ["faithfulness"],
        "output": "o",
        "context": ["x", "y"],
        "thresholds": {"faithfulness": 0.1},
    }
    r = client.post(URL, json=body)
    assert r.json()["results"]["faithfulness"]["passed"] is True
    assert r.json()["results"]["faithfulness"]["threshold"] == 0.1
    body["thresholds"] = {"faithfulnes": 0.1}
    err = client.post(URL, json=body).json()["detail"][0]
    assert err["loc"] == ["body", "thresholds", "faithfulnes"] and "did you mean 'faithfulness'" in err["msg"]
    body["thresholds"] = {"faithfulness": 1.5}
    assert client.post(URL, json=body).json()["detail"][0]["loc"] == ["body", "thresholds", "faithfulness"]


def test_unknown_model_is_400(client):
    r = client.post(URL, json={"evaluators": ["faithfulness"], "output": "o", "context": "c", "model": "gpt-4"})
    assert r.status_code == 400
    assert r.json()["detail"]["error_type"] == "api_usage_error"


def test_typed_question_over_http_and_invalid_question_loc(client):
    ok = client.post(
        URL,
        json={
            "evaluators": ["typed_question"],
            "input": "ticket",
            "question": {"type": "choice", "criteria": {"a": None, "b": "bee"}},
        },
    )
    assert ok.status_code == 200 and ok.json()["results"]["typed_question"]["label"] == "a"
    bad = client.post(
        URL,
        json={
            "evaluators": ["typed_question"],
            "input": "ticket",
            "question": {"type": "score", "criteria": {"0": "low"}},
        },
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"][:3] == ["body", "question", "score"]


def test_wrong_field_type_is_422(client):
    r = client.post(URL, json={"evaluators": ["faithfulness"], "output": 12, "context": ["c"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "output"]


def test_the_server_module_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys; import logitjudge.server.evaluate_routes, logitjudge.rubrics.api, "
        "logitjudge.cli.evaluate; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _leaning(state, q):
    """A judge that leans to the first option, more when the state mentions money."""
    if q.type == "noul":
        return [0.5, 0.5]
    lean = 4.0 if "money" in str(state) else 2.0
    return [lean] + [1.0] * (len(q.options) - 1)


def test_batch_form_x_debias_divides_each_typed_questions_prior_out(client):
    import numpy as np

    from logitjudge.rubrics.debias import MIN_BATCH, batch_calibrate

    question = {"type": "choice", "instructions": "Which team?", "criteria": {"pay": "money", "ship": "parcels"}}
    items = [
        {"id": f"t{i}", "input": "money back please" if i % 3 == 0 else "where is my parcel", "question": question}
        for i in range(MIN_BATCH + 2)
    ]
    judge = Judge(ScriptedEngine(_leaning))
    with TestClient(create_app(judge)) as c:
        raw = c.post(URL, json={"evaluators": ["typed_question"], "items": items}).json()
        got = c.post(URL, json={"evaluators": ["typed_question"], "items": items, "x_debias": "batch"}).json()
        assert got["x_debias"] == {"mode": "batch", "questions": 1, "answers": len(items), "left": 0}
        assert "x_debias" not in raw
        before = np.array(
            [list(r["results"]["typed_question"]["answer"]["probabilities"].values()) for r in raw["results"]]
        )
        after = np.array(
            [list(r["results"]["typed_question"]["answer"]["probabilities"].values()) for r in got["results"]]
        )
        np.testing.assert_allclose(after, batch_calibrate(before), atol=1e-12)
        # the judge says "pay" to all; with its lean divided out the money items keep it, the rest move
        assert {r["results"]["typed_question"]["label"] for r in raw["results"]} == {"pay"}
        labels = [r["results"]["typed_question"]["label"] for r in got["results"]]
        assert labels == ["pay" if i % 3 == 0 else "ship" for i in range(len(items))]
        # the flat form has one item: nothing to divide by; an unknown mode is the field's 422
        flat = c.post(
            URL, json={"evaluators": ["typed_question"], "input": "x", "question": question, "x_debias": "batch"}
        )
        assert flat.status_code == 422 and flat.json()["detail"][0]["loc"] == ["body", "x_debias"]
        bad = c.post(URL, json={"evaluators": ["typed_question"], "items": items, "x_debias": "rotate"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "x_debias"]
