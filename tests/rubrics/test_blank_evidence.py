"""Blank evidence is never evidence (issue 10): a context chunk, or an output, that is empty after
stripping whitespace gets a 422 naming it on the API and an error result in datasets; it never
gets a passing score.

Before the fix, ``context: [""]`` with a made-up answer passed faithfulness, chunk_support
("supports") and chunk_relevance on the default model.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from logitjudge.rubrics import evaluate
from logitjudge.server.app import create_app

URL = "/api/v1/evaluate"
MADE_UP = "The Eiffel Tower was moved to Rome in 1999 and now serves as a lighthouse."
QUESTION = "Where is the Eiffel Tower?"
CONTEXT_EVALUATORS = ["faithfulness", "chunk_support", "chunk_relevance"]


@pytest.fixture(scope="module")
def client(default_judge):
    with TestClient(create_app(default_judge)) as c:
        yield c


@pytest.mark.parametrize(
    "context,index",
    [
        ([""], 0),
        (["   \n\t"], 0),
        (["The tower is in Paris.", " "], 1),
        (["Paris.", {"text": "  "}], 1),
        (["\u200b"], 0),  # invisible format characters are blank too (a new user's report)
        (["Paris.", "\ufeff\u2063\u200d"], 1),
    ],
)
@pytest.mark.parametrize("evaluators", [["faithfulness"], ["chunk_support"], ["RAG"]])
def test_blank_chunk_is_a_422_naming_the_chunk(client, context, index, evaluators):
    body = {"evaluators": evaluators, "input": QUESTION, "output": MADE_UP, "context": context}
    r = client.post(URL, json=body)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "context", index]
    assert f"context[{index}]" in error["msg"]


def test_blank_chunk_in_a_batch_names_the_item(client):
    items = [
        {"input": QUESTION, "output": MADE_UP, "context": ["The tower is in Paris."]},
        {"input": QUESTION, "output": MADE_UP, "context": ["fine", ""]},
    ]
    r = client.post(URL, json={"evaluators": ["faithfulness"], "items": items})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "items", 1, "context", 1]


@pytest.mark.parametrize("output", ["  ", [" ", ""], {"answer": " "}])
def test_blank_output_is_missing_where_an_evaluator_needs_it(client, output):
    body = {"evaluators": ["faithfulness"], "output": output, "context": ["The tower is in Paris."]}
    r = client.post(URL, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "output"]


def test_blank_evidence_never_passes_in_a_dataset_run(default_judge):
    """Datasets are not strict: the evaluators that read the context get an error result, with
    the reason; an evaluator that needs no context still runs on the real model."""
    items = [
        {"id": "blank", "input": QUESTION, "output": MADE_UP, "context": [""]},
        {"id": "mixed", "input": QUESTION, "output": MADE_UP, "context": ["The Eiffel Tower is in Paris.", "\n"]},
        {"id": "no-output", "input": QUESTION, "output": [" "], "context": ["The Eiffel Tower is in Paris."]},
    ]
    run = evaluate(default_judge, items, ["faithfulness", "chunk_support", "chunk_relevance", "answer_relevancy"])
    blank, mixed, no_output = run.results
    for res in (blank, mixed):
        for name in CONTEXT_EVALUATORS:
            r = res.results[name]
            assert r.status == "error" and r.passed is None and r.score is None, r
            assert "blank chunk is never evidence" in (r.reason or "")
        assert res.results["answer_relevancy"].status == "ok"  # reads no context
    assert no_output.results["faithfulness"].status == "skipped"
    assert "output" in (no_output.results["faithfulness"].reason or "")
    assert no_output.results["chunk_relevance"].status == "ok"  # needs input and context only
