"""Claim-level evaluators (``"per_claim": true``, ``claim_share`` scoring): one yes/no question per
sentence of ``output``, all in the item's one request, scored by the mean P(supported).

Splitting and scoring arithmetic are pure functions (answers chosen by the test on a scripted
engine); that each claim's answer is the answer to a hand-built question over the same state
runs on the real default model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from logitjudge.contract.evaluate import Item
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.definitions import Catalogue, EvaluatorDef
from logitjudge.rubrics.questions import QuestionKey, build_questions, claims_of, split_sentences
from logitjudge.rubrics.registry import Registry, default_registry
from logitjudge.rubrics.scoring import contrast_probability

VARIANTS = Path(__file__).resolve().parents[2] / "benchmarks" / "variants" / "faithfulness-claims.json"

ITEM = {
    "id": "c1",
    "input": "Where is the Oberoi Group based, and how old is it?",
    "output": "The Oberoi Group is based in Delhi. It was founded in 1934 by Dr. M. S. Oberoi.",
    "context": ["The Oberoi Group is a hotel company with its head office in Delhi."],
}


def _defn(**kw):
    base = dict(
        name="claims",
        version="1",
        summary="s",
        source="ours",
        required=["output", "context"],
        question_type="noul",
        per_claim=True,
        template="This sentence of `output` is supported by `context`: {claim}",
        scoring="claim_share",
        threshold=0.5,
    )
    base.update(kw)
    return EvaluatorDef.model_validate(base)


def test_sentences_are_split_by_rule_keeping_abbreviations_and_numbers():
    assert split_sentences(ITEM["output"]) == [
        "The Oberoi Group is based in Delhi.",
        "It was founded in 1934 by Dr. M. S. Oberoi.",
    ]
    assert split_sentences("It costs $3.50 a day. Really?  Yes!") == ["It costs $3.50 a day.", "Really?", "Yes!"]
    assert split_sentences("   ") == []


def test_claims_of_a_structured_output_is_one_compact_json_claim():
    assert claims_of(Item(output={"city": "Delhi", "year": 1934}, context=["x"])) == ['{"city":"Delhi","year":1934}']
    assert claims_of(Item(output="no full stop", context=["x"])) == ["no full stop"]


def test_one_question_per_claim_quoting_it_as_json():
    qs = build_questions(_defn(), Item.model_validate(ITEM))
    first, second = QuestionKey("claims", claim=0), QuestionKey("claims", claim=1)
    assert list(qs) == [first, second] and [str(k) for k in qs] == ["claims.c0", "claims.c1"]
    assert qs[first].instructions == (
        'This sentence of `output` is supported by `context`: "The Oberoi Group is based in Delhi."'
    )
    assert qs[second].instructions.endswith('"It was founded in 1934 by Dr. M. S. Oberoi."')


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(template="Each claim of `output` is supported by `context`."), "claim"),
        (dict(required=["context"], optional=["output"]), "require `output`"),
        (dict(per_claim=False), "per_claim=True"),
        (dict(scoring="probability"), "per_claim=False"),
        (dict(per_claim=False, scoring="probability"), r"only for per-claim"),
    ],
)
def test_per_claim_definitions_are_checked_at_load(bad, match):
    with pytest.raises(ValueError, match=match):
        _defn(**bad)


def test_score_is_the_mean_claim_probability_and_the_weakest_claim_is_reported(scripted):
    def script(state, question):
        return [0.9, 0.1] if "Delhi" in question.instructions else [0.2, 0.8]

    judge = scripted(script)
    reg = Registry(Catalogue(format=1, evaluators=(_defn(),)))
    (res,) = evaluate(judge, [ITEM], ["claims"], registry=reg).results
    r = res.results["claims"]
    assert r.status == "ok"
    assert r.score == pytest.approx((0.9 + 0.2) / 2)
    assert r.x_min_score == pytest.approx(0.2)
    assert r.label == "1/2 claims supported"
    assert r.passed is True  # 0.55 >= 0.5
    assert [(d.index, d.passed) for d in r.details] == [(0, True), (1, False)]
    assert [d.score for d in r.details] == pytest.approx([0.9, 0.2])
    (call,) = judge.engine.calls
    assert len(call) == 1 and len(call[0].questions) == 2, "both claims in the item's one request"


def test_contrast_is_taken_per_claim_against_the_twin_without_context(scripted):
    def script(state, question):
        first = "Delhi" in question.instructions
        if "context" in state:
            return [0.9, 0.1] if first else [0.6, 0.4]
        return [0.5, 0.5] if first else [0.8, 0.2]

    judge = scripted(script)
    reg = Registry(Catalogue(format=1, evaluators=(_defn(contrast="context"),)))
    (res,) = evaluate(judge, [ITEM], ["claims"], registry=reg).results
    r = res.results["claims"]
    per_claim = [contrast_probability(0.9, 0.5), contrast_probability(0.6, 0.8)]
    assert [d.score for d in r.details] == pytest.approx(per_claim)
    assert [d.probability for d in r.details] == pytest.approx([0.9, 0.6]), "P(yes) with the context"
    assert r.score == pytest.approx(sum(per_claim) / 2)
    assert r.x_min_score == pytest.approx(min(per_claim))
    assert r.x_p_yes_with_context == pytest.approx(0.75)
    assert r.x_p_yes_without_context == pytest.approx(0.65)
    (call,) = judge.engine.calls
    assert [sorted(req.state) for req in call] == [["context", "input", "output"], ["input", "output"]]
    assert call[0].questions == call[1].questions


def test_variants_file_replaces_faithfulness_with_the_claim_level_version():
    reg = default_registry().with_variants(VARIANTS)
    assert reg.get("faithfulness").per_claim and reg.get("faithfulness").version == "3"
    assert reg.get("chunk_support") == default_registry().get("chunk_support")
    assert [e.name for e in reg.catalogue.evaluators] == [e.name for e in default_registry().catalogue.evaluators]


def test_a_variant_must_replace_a_known_evaluator_under_a_new_version(tmp_path):
    (same := tmp_path / "same.json").write_text(json.dumps([default_registry().get("faithfulness").model_dump()]))
    with pytest.raises(ValueError, match="bump it"):
        default_registry().with_variants(same)
    (unknown := tmp_path / "unknown.json").write_text(json.dumps([_defn().model_dump()]))
    with pytest.raises(ValueError, match="replaces no evaluator"):
        default_registry().with_variants(unknown)


def test_on_the_real_model_each_claim_is_the_hand_built_question_over_the_same_state(default_judge):
    reg = Registry(Catalogue(format=1, evaluators=(_defn(),)))
    (res,) = evaluate(default_judge, [ITEM], ["claims"], registry=reg).results
    r = res.results["claims"]
    state = {k: ITEM[k] for k in ("input", "output", "context")}
    by_hand = default_judge.answer_many(
        [
            EngineRequest(
                state=state,
                questions=tuple(
                    Question(
                        "noul",
                        f"This sentence of `output` is supported by `context`: {json.dumps(c)}",
                        (Option("true"), Option("false")),
                    )
                    for c in split_sentences(ITEM["output"])
                ),
            )
        ]
    )[0]
    assert [d.probability for d in r.details] == pytest.approx([a.probabilities[0] for a in by_hand.answers], abs=1e-4)
    assert r.score == pytest.approx(sum(d.probability for d in r.details) / 2, abs=1e-9)
    assert r.details[0].probability != pytest.approx(r.details[1].probability, abs=1e-4), "two different claims"
