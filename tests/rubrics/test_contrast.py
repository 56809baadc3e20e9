"""Contrast with a content-free context (``"contrast": "context"``): the question is asked again
over the state without ``context`` and the score is how much the context raises P(yes).

Scoring arithmetic and routing run on a scripted engine (answers chosen by the test); that the
twin request is exactly "the same question over the state without context" runs on the real
default model, against a request built by hand.
"""

from __future__ import annotations

import math

import pytest

from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.definitions import Catalogue, EvaluatorDef
from logitjudge.rubrics.registry import Registry
from logitjudge.rubrics.scoring import contrast_probability

ITEM = {
    "id": "q1",
    "input": "Where is the head office of the Oberoi Group?",
    "output": "Delhi",
    "context": ["The Oberoi Group is a hotel company with its head office in Delhi."],
}


def _defn(**kw):
    base = dict(
        name="grounded",
        version="1",
        summary="s",
        source="ours",
        required=["output", "context"],
        question_type="noul",
        template="Every factual claim in `output` is supported by `context`.",
        scoring="probability",
        threshold=0.5,
        contrast="context",
    )
    base.update(kw)
    return EvaluatorDef.model_validate(base)


def test_contrast_probability_is_the_odds_ratio():
    assert contrast_probability(0.8, 0.8) == pytest.approx(0.5)
    # odds 4 / odds 1 = 4 -> 0.8
    assert contrast_probability(0.8, 0.5) == pytest.approx(0.8)
    # odds 1/4 / odds 1 -> 0.2; symmetric
    assert contrast_probability(0.2, 0.5) == pytest.approx(0.2)
    assert contrast_probability(0.5, 0.8) == pytest.approx(0.2)
    # saturated answers stay finite and ordered
    hi, lo = contrast_probability(1.0, 0.0), contrast_probability(0.0, 1.0)
    assert 0.0 < lo < 0.5 < hi < 1.0 and math.isfinite(hi)


@pytest.mark.parametrize(
    "bad",
    [dict(scoring="rubric", question_type="score", levels=["a", "b"]), dict(required=["output"])],
)
def test_contrast_needs_probability_scoring_and_a_required_context(bad):
    with pytest.raises(ValueError, match="contrast"):
        _defn(**bad)


def test_the_score_is_the_contrast_and_the_twin_has_no_context(scripted):
    def script(state, question):
        return [0.9, 0.1] if "context" in state else [0.6, 0.4]

    judge = scripted(script)
    reg = Registry(Catalogue(format=1, evaluators=(_defn(),)))
    (res,) = evaluate(judge, [ITEM], ["grounded"], registry=reg).results
    r = res.results["grounded"]
    assert r.status == "ok"
    assert r.x_p_yes_with_context == pytest.approx(0.9)
    assert r.x_p_yes_without_context == pytest.approx(0.6)
    assert r.score == pytest.approx(contrast_probability(0.9, 0.6))  # odds 9 / 1.5 = 6 -> 6/7
    assert r.score == pytest.approx(6 / 7)
    assert r.passed is True
    assert res.usage.requests == 2
    (call,) = judge.engine.calls
    assert [sorted(req.state) for req in call] == [["context", "input", "output"], ["input", "output"]]
    assert call[0].questions == call[1].questions


def test_context_that_lowers_p_yes_fails_even_when_p_yes_is_high(scripted):
    """The failure contrast targets: P(yes) high on the answer alone, and the context lowers it."""
    judge = scripted(lambda state, q: [0.7, 0.3] if "context" in state else [0.95, 0.05])
    reg = Registry(Catalogue(format=1, evaluators=(_defn(),)))
    (res,) = evaluate(judge, [ITEM], ["grounded"], registry=reg).results
    r = res.results["grounded"]
    assert r.x_p_yes_with_context == pytest.approx(0.7)
    assert r.score < 0.5 and r.passed is False


def test_only_contrast_evaluators_are_asked_twice(scripted):
    plain = _defn(name="plain", contrast=None)
    judge = scripted(lambda state, q: [0.9, 0.1] if "context" in state else [0.6, 0.4])
    reg = Registry(Catalogue(format=1, evaluators=(_defn(), plain)))
    (res,) = evaluate(judge, [ITEM], ["grounded", "plain"], registry=reg).results
    assert res.results["plain"].score == pytest.approx(0.9)
    assert res.results["plain"].x_p_yes_without_context is None
    (call,) = judge.engine.calls
    assert len(call[0].questions) == 2 and len(call[1].questions) == 1


def test_a_failed_twin_marks_only_the_contrast_evaluator_error(scripted):
    from logitjudge.errors import EngineDeadError

    judge = scripted(lambda state, q: [0.9, 0.1])
    real = judge.engine.run_batch

    def run_batch(requests):
        out = real(requests)
        return [EngineDeadError("boom") if "context" not in r.state else o for r, o in zip(requests, out)]

    judge.engine.run_batch = run_batch
    reg = Registry(Catalogue(format=1, evaluators=(_defn(), _defn(name="plain", contrast=None))))
    (res,) = evaluate(judge, [ITEM], ["grounded", "plain"], registry=reg).results
    assert res.results["grounded"].status == "error"
    assert "without `context`" in res.results["grounded"].reason
    assert res.results["plain"].status == "ok"


def test_on_the_real_model_the_twin_equals_a_hand_built_request_without_context(default_judge):
    reg = Registry(Catalogue(format=1, evaluators=(_defn(),)))
    (res,) = evaluate(default_judge, [ITEM], ["grounded"], registry=reg).results
    r = res.results["grounded"]
    q = Question(
        "noul",
        "Every factual claim in `output` is supported by `context`.",
        (Option("true"), Option("false")),
    )
    with_ctx, without = default_judge.answer_many(
        [
            EngineRequest(state={k: ITEM[k] for k in ("input", "output", "context")}, questions=(q,)),
            EngineRequest(state={k: ITEM[k] for k in ("input", "output")}, questions=(q,)),
        ]
    )
    assert r.x_p_yes_with_context == pytest.approx(with_ctx.answers[0].probabilities[0], abs=1e-4)
    assert r.x_p_yes_without_context == pytest.approx(without.answers[0].probabilities[0], abs=1e-4)
    assert r.x_p_yes_with_context != pytest.approx(r.x_p_yes_without_context, abs=1e-3)
    assert r.score == pytest.approx(contrast_probability(r.x_p_yes_with_context, r.x_p_yes_without_context), abs=1e-9)
