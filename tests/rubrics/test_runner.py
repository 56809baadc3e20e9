"""One item -> one engine call over one state; suites skip what they cannot run; never NaN."""

from __future__ import annotations

import json

import pytest

from logitjudge.contract.evaluate import Item
from logitjudge.errors import ContextOverflowError, UnknownModelError
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.items import normalize_row
from logitjudge.rubrics.questions import QuestionKey
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.runner import MissingFieldError, plan_item

ITEM = {
    "id": "a",
    "input": "What is the refund window?",
    "output": "You can get a refund within 30 days.",
    "expected": "30 days from delivery.",
    "context": ["Refunds are accepted within 30 days of delivery.", "Shipping takes 3-5 days.", "Call us."],
    "evaluators": ["ignored here"],
    "meta": {"not": "state"},
}


def test_all_evaluators_of_one_item_make_exactly_one_engine_call_with_one_state(scripted):
    """One call: the item's one request over its whole state, plus faithfulness's contrast twin
    (the same question over the state without ``context``), and, for the version 2 evaluators
    that judge less than the whole item, each chunk alone, a content-free chunk and (entity
    recall, when an entity is not found verbatim) the context alone."""
    judge = scripted(lambda s, q: [1.0] * len(q.options))
    run = evaluate(judge, [ITEM], ["Everything"])
    calls = judge.engine.calls
    assert len(calls) == 1, "one engine call"
    (requests,) = calls
    req, twin, *others = requests
    chunk_states = [f"Passage: {c}" for c in ITEM["context"]] + ["Passage: N/A"]
    assert [r.state for r in others[: len(chunk_states)]] == chunk_states
    rest = others[len(chunk_states) :]
    # answer_relevancy v2: the output alone and a content-free output (and each sentence of a longer one)
    answer_states = [r.state for r in rest if isinstance(r.state, str) and r.state.startswith("Answer: ")]
    assert "Answer: N/A" in answer_states and f"Answer: {ITEM['output']}" in answer_states
    assert all(r.state == {"context": ITEM["context"]} for r in rest if r.state not in answer_states)
    # the single-question evaluators over the whole item (the version 2 ones ask elsewhere)
    whole_item = [e for e in default_registry().select(["Everything"]) if not e.definition.chunk_state]
    whole_item = [e for e in whole_item if e.definition.scoring not in ("entity_recall", "answer_probes")]
    assert len(req.questions) == len(whole_item)
    assert req.state == {
        "input": ITEM["input"],
        "output": ITEM["output"],
        "expected": ITEM["expected"],
        "context": ITEM["context"],
    }
    faithfulness = plan_item(Item.model_validate(ITEM), default_registry().select(["faithfulness"]), strict=True)
    assert twin.questions == tuple(faithfulness.questions.values())
    assert twin.state == {k: v for k, v in req.state.items() if k != "context"}
    assert all(r.status == "ok" for r in run.results[0].results.values())
    assert run.usage.requests == len(requests)


def test_question_ids_are_namespaced_and_never_reach_the_engine(scripted):
    versions_1 = ["chunk_relevance@1", "chunk_support@1", "RAG"]  # the per-chunk questions over the item
    plan = plan_item(Item.model_validate(ITEM), default_registry().select(versions_1), strict=True)
    assert [str(key) for key in plan.questions][:6] == [
        "chunk_relevance.0",
        "chunk_relevance.1",
        "chunk_relevance.2",
        "chunk_support.0",
        "chunk_support.1",
        "chunk_support.2",
    ]
    assert QuestionKey("faithfulness") in plan.questions
    judge = scripted(lambda s, q: [1.0] * len(q.options))
    evaluate(judge, [ITEM], ["RAG"])
    text = json.dumps([str(q) for q in judge.engine.calls[0][0].questions])
    assert "chunk_relevance.0" not in text and "faithfulness" not in text.replace("faithful", "")


def test_the_state_does_not_depend_on_the_selection(scripted):
    states = []
    for names in (["faithfulness"], ["RAG"], ["conciseness", "chunk_support"]):
        judge = scripted(lambda s, q: [1.0] * len(q.options))
        evaluate(judge, [ITEM], names)
        states.append(judge.engine.calls[0][0].state)
    assert states[0] == states[1] == states[2]


def test_suite_members_missing_fields_are_skipped_with_a_reason(scripted):
    judge = scripted(lambda s, q: [1.0] * len(q.options))
    run = evaluate(judge, [{"input": "q", "output": "a"}], ["RAG"])
    res = run.results[0].results
    assert res["answer_relevancy"].status == "ok"
    for name in (
        "chunk_relevance",
        "chunk_support",
        "faithfulness",
        "context_recall",
        "context_relevancy",
        "context_entity_recall",
    ):
        assert res[name].status == "skipped"
        assert res[name].score is None and res[name].passed is None
        assert "`context`" in res[name].reason
    assert res["context_recall"].reason == "missing required fields `context`, `expected`"
    assert run.summary["faithfulness"].skipped == 1 and run.summary["faithfulness"].n == 0
    mean = run.summary["faithfulness"].metric("mean_score")
    assert mean.value is None and mean.reason  # undetermined -> null plus a reason, never NaN


def test_empty_context_counts_as_missing(scripted):
    run = evaluate(scripted(lambda s, q: [1, 1]), [{"output": "a", "context": []}], ["faithfulness"])
    assert run.results[0].results["faithfulness"].status == "skipped"


def test_an_item_with_nothing_to_run_makes_no_engine_call(scripted):
    judge = scripted(lambda s, q: [1, 1])
    run = evaluate(judge, [{"input": "q"}], ["RAG"])
    assert judge.engine.calls == []
    assert run.results[0].passed is None and run.usage.requests == 0


def test_explicit_evaluator_missing_field_is_an_error_when_strict():
    item = Item.model_validate({"input": "q", "context": ["c"]})
    with pytest.raises(MissingFieldError) as info:
        plan_item(item, default_registry().select(["faithfulness"]), strict=True, field_prefix=("items", 2))
    assert info.value.field == ("items", 2, "output")
    # through a suite it is skipped even when strict
    plan = plan_item(item, default_registry().select(["RAG"]), strict=True)
    assert plan.early["faithfulness"].status == "skipped"


def test_engine_error_for_one_item_marks_its_evaluators_error_and_spares_the_others(scripted):
    def script(state, q):
        if "boom" in json.dumps(state):
            raise ContextOverflowError("too long", part="state + longest question", tokens=10, limit=5)
        return [1.0] * len(q.options)

    judge = scripted(script)
    engine = judge.engine
    real = engine.run_batch

    def run_batch(requests):
        out = []
        for r in requests:
            try:
                out += real([r])
            except ContextOverflowError as exc:
                out.append(exc)
        return out

    engine.run_batch = run_batch
    run = evaluate(
        judge,
        [{"output": "a", "context": ["boom"]}, {"output": "b", "context": ["fine"]}],
        ["faithfulness"],
        batch_size=8,
    )
    bad, good = (r.results["faithfulness"] for r in run.results)
    assert bad.status == "error" and "ContextOverflowError" in bad.reason
    assert good.status == "ok"
    assert run.summary["faithfulness"].errors == 1 and run.summary["faithfulness"].n == 1


def test_unknown_model_is_refused_before_any_work(scripted):
    judge = scripted(lambda s, q: [1, 1])
    with pytest.raises(UnknownModelError):
        evaluate(judge, [ITEM], ["faithfulness"], model="gpt-4")
    assert judge.engine.calls == []


def test_batches_share_engine_calls_but_keep_one_state_per_item(scripted):
    judge = scripted(lambda s, q: [1.0] * len(q.options))
    items = [{"id": i, "output": f"o{i}", "context": [f"c{i}"]} for i in range(5)]
    run = evaluate(judge, items, ["faithfulness"], batch_size=2)
    # each item: its request and faithfulness's contrast twin, in the batch's one call
    assert [len(c) for c in judge.engine.calls] == [4, 4, 2]
    assert [sorted(r.state) for r in judge.engine.calls[0]] == [["context", "output"], ["output"]] * 2
    assert [r.id for r in run.results] == [0, 1, 2, 3, 4]


def test_ragas_names_are_mapped():
    row = normalize_row({"question": "q?", "answer": "a", "contexts": '["c1", "c2"]', "ground_truth": "g"})
    mapped = {k: row[k] for k in ("input", "output", "context", "expected")}
    assert mapped == {"input": "q?", "output": "a", "context": ["c1", "c2"], "expected": "g"}
    assert "question" not in row  # RAGAS text, not a typed question
    typed = normalize_row({"input": "x", "question": {"type": "noul"}})
    assert typed["question"] == {"type": "noul"}
    assert normalize_row({"user_input": "u", "response": "r", "retrieved_contexts": ["c"], "reference": "f"}) == {
        "user_input": "u",
        "response": "r",
        "retrieved_contexts": ["c"],
        "reference": "f",
        "input": "u",
        "output": "r",
        "context": ["c"],
        "expected": "f",
    }


def test_context_as_a_single_string_is_one_chunk():
    assert Item.model_validate({"context": "one chunk"}).state() == {"context": ["one chunk"]}


def test_a_head_evaluator_without_its_head_falls_back_and_says_so():
    """chunk_support@4 reads the `chunk_support` head: a judge without it gets @3's answer, with an
    x_warning naming `logitjudge fit`; with it, one head-read question per chunk and claim."""
    from support.scripted import ScriptedEngine

    from logitjudge.judge import Judge

    item = {"output": "Tokens are free; the API is fast.", "context": ["Tokens are free.", "The API is slow."]}
    plain = ScriptedEngine(lambda s, q: [1.0] * len(q.options))
    res = evaluate(Judge(plain), [item], ["chunk_support"]).results[0].results["chunk_support"]
    assert res.version == "3" and res.x_warning is not None
    assert "chunk_support@4" in res.x_warning
    assert "logitjudge fit --evaluator chunk_support@4 --adapter" in res.x_warning
    headed = ScriptedEngine(lambda s, q: [3.0, 1.0, 1.0], heads=("chunk_support",))
    res = evaluate(Judge(headed), [item], ["chunk_support"]).results[0].results["chunk_support"]
    assert res.version == "4" and res.x_warning is None
    questions = [q for call in headed.calls for req in call for q in req.questions]
    assert len(questions) == 4 and {q.head for q in questions} == {"chunk_support"}  # 2 chunks x 2 claims
    assert [d.label for d in res.details or ()] == ["supports", "supports"]
    assert (res.details or [])[0].x_features == {
        "claim": 0.0,
        "zero_shot_supports": 0.6,
        "zero_shot_contradicts": 0.2,
        "zero_shot_unrelated": 0.2,
    }


def test_the_server_falls_back_too():
    from fastapi.testclient import TestClient
    from support.scripted import ScriptedEngine

    from logitjudge.judge import Judge
    from logitjudge.server.app import create_app

    app = create_app(Judge(ScriptedEngine(lambda s, q: [1.0] * len(q.options))))
    with TestClient(app) as client:
        body = {"output": "Tokens are free.", "context": ["Tokens are free."], "evaluators": ["chunk_support"]}
        got = client.post("/api/v1/evaluate", json=body).json()
    res = got["results"]["chunk_support"]
    assert res["version"] == "3" and "logitjudge fit" in res["x_warning"]


def test_the_server_falls_back_from_a_head_trained_on_another_question(caplog):
    """A head of the right name trained on another evaluator version's question: the server logs
    the fallback at start and answers with the fallback version; one trained on the version
    asked (or not saying) is used."""
    import logging

    from fastapi.testclient import TestClient
    from support.scripted import ScriptedEngine

    from logitjudge.judge import Judge
    from logitjudge.server.app import create_app

    engine = ScriptedEngine(lambda s, q: [1.0] * len(q.options), heads=["chunk_support"])
    engine.head_evaluators = {"chunk_support": "chunk_support@2"}
    with caplog.at_level(logging.WARNING, logger="logitjudge.server"):
        app = create_app(Judge(engine))
    logged = [r.getMessage() for r in caplog.records if r.name == "logitjudge.server"]
    assert any(
        "chunk_support@4 reads a branch adapter or a trained head 'chunk_support', and none" in m for m in logged
    )
    body = {"output": "Tokens are free.", "context": ["Tokens are free."], "evaluators": ["chunk_support"]}
    with TestClient(app) as client:
        res = client.post("/api/v1/evaluate", json=body).json()["results"]["chunk_support"]
    assert res["version"] == "3" and "none trained for it" in res["x_warning"]
    engine.head_evaluators = {"chunk_support": "chunk_support@4"}
    with TestClient(create_app(Judge(engine))) as client:
        res = client.post("/api/v1/evaluate", json=body).json()["results"]["chunk_support"]
    assert res["version"] == "4" and "x_warning" not in res
