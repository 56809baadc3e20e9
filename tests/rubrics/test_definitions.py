"""Evaluator definitions load strictly; the registry expands suites and answers typos."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from logitjudge.rubrics.definitions import Catalogue, EvaluatorDef, template_references
from logitjudge.rubrics.registry import Registry, UnknownEvaluatorError, default_registry

ISSUE_EVALUATORS = [
    "chunk_relevance",
    "chunk_support",
    "answer_relevancy",
    "context_entity_recall",
    "faithfulness",
    "answer_correctness",
    "context_recall",
    "context_relevancy",
    "conciseness",
    "possible",
    "task_completion",
]


def _noul(**over):
    base = {
        "name": "x",
        "version": "1",
        "summary": "s",
        "source": "ours",
        "required": ["output"],
        "question_type": "noul",
        "template": "Is `output` polite?",
        "scoring": "probability",
        "threshold": 0.5,
    }
    return {**base, **over}


def test_catalogue_has_every_evaluator_of_the_issue_and_the_three_suites():
    reg = default_registry()
    assert [n for n in reg.evaluators if n != "typed_question"] == ISSUE_EVALUATORS
    assert list(reg.suites) == ["RAG", "Correctness", "Everything"]
    assert [s.name for s in reg.select(["Everything"])] == ISSUE_EVALUATORS


def test_docs_wording_is_verbatim():
    """Version 1 of the per-chunk evaluators keeps the hosted pages' wording, selectable as name@1."""
    reg = default_registry()
    assert reg.versions["chunk_relevance@1"].template == (
        "`context[i]` contains information that helps answer `input` (or supports `expected` if present). "
        "Judge this chunk on its own."
    )
    assert reg.versions["chunk_support@1"].template == (
        "How does `context[i]` relate to the claims made in `output`? Judge this chunk on its own."
    )
    assert [o.name for o in reg.versions["chunk_support@1"].options or ()] == ["supports", "contradicts", "unrelated"]
    (old,) = reg.select(["chunk_relevance@1"])
    assert old.definition.version == "1" and old.explicit
    assert reg.get("chunk_relevance").version == "2" and reg.get("chunk_relevance").chunk_state
    assert reg.get("answer_relevancy").levels[3] == (
        "The output directly and completely addresses the question with no padding"
    )


def test_an_unknown_version_is_an_unknown_name():
    with pytest.raises(UnknownEvaluatorError):
        default_registry().select(["chunk_relevance@9"])


def test_unknown_key_is_refused():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        EvaluatorDef.model_validate(_noul(treshold=0.5))


def test_template_reference_to_undeclared_field_is_refused():
    with pytest.raises(ValidationError, match="`expected`, which is not a declared field"):
        EvaluatorDef.model_validate(_noul(template="Does `output` match `expected`?"))
    # declared as optional: fine
    EvaluatorDef.model_validate(_noul(template="Does `output` match `expected`?", optional=["expected"]))


def test_typo_in_a_reference_is_refused():
    with pytest.raises(ValidationError, match="`ouput`"):
        EvaluatorDef.model_validate(_noul(template="Is `ouput` polite?"))


def test_chunk_index_only_in_per_chunk_evaluators():
    with pytest.raises(ValidationError, match=r"context\[i\]"):
        EvaluatorDef.model_validate(_noul(template="Is `context[i]` polite?", required=["context"]))


def test_backtick_span_that_is_not_a_field_is_refused():
    with pytest.raises(ValueError, match="not a field reference"):
        template_references("Say `I cannot` here")


def test_scoring_must_fit_the_question_type():
    with pytest.raises(ValidationError, match="scoring 'rubric' needs question_type 'score'"):
        EvaluatorDef.model_validate(_noul(scoring="rubric"))


def test_score_levels_bounds():
    bad = _noul(question_type="score", scoring="rubric", levels=["only one"])
    with pytest.raises(ValidationError, match="levels must number 2..10"):
        EvaluatorDef.model_validate(bad)


def test_suite_naming_an_unknown_evaluator_is_refused():
    cat = {
        "format": 1,
        "evaluators": [_noul()],
        "suites": [{"name": "S", "summary": "", "members": ["x", "y"]}],
    }
    with pytest.raises(ValidationError, match="unknown evaluators: y"):
        Catalogue.model_validate(cat)


def test_registry_from_file_adds_an_evaluator_without_code(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"format": 1, "evaluators": [_noul(name="politeness")]}))
    reg = Registry.from_file(path)
    assert reg.get("politeness").template == "Is `output` polite?"


def test_did_you_mean():
    reg = default_registry()
    with pytest.raises(UnknownEvaluatorError) as info:
        reg.select(["RAG", "faithfulnes"])
    assert info.value.field == ("evaluators", 1)
    assert "did you mean 'faithfulness'" in info.value.message
    assert info.value.suggestions[0] == "faithfulness"


def test_unknown_name_far_from_everything_lists_the_evaluators_and_suites_not_every_version():
    with pytest.raises(UnknownEvaluatorError) as info:
        default_registry().select(["zzzz"])
    message = info.value.message
    assert "evaluators: chunk_relevance, chunk_support" in message and "suites: RAG" in message
    assert "chunk_support@1" not in message and "name@version" in message


def test_suite_expansion_order_dedup_and_explicit_flag():
    reg = default_registry()
    sel = reg.select(["Correctness", "answer_relevancy", "rag"])
    names = [s.name for s in sel]
    assert names[:4] == ["answer_correctness", "answer_relevancy", "task_completion", "conciseness"]
    assert names.count("answer_relevancy") == 1
    assert names[4:] == [
        "chunk_relevance",
        "chunk_support",
        "faithfulness",
        "context_recall",
        "context_relevancy",
        "context_entity_recall",
    ]
    explicit = {s.name for s in sel if s.explicit}
    assert explicit == {"answer_relevancy"}
