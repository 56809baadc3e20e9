"""Version 2 of the RAG evaluators: what each question sees, and the arithmetic of their scores.

Behaviour on the default model is in ``test_evaluator_pages.py``; here the scripted engine (fixed
answers chosen by the test) checks routing (each chunk its own request, holding that chunk only),
and the pure scoring functions check their formulas on hand-computed values.
"""

from __future__ import annotations

import math

import pytest

from logitjudge.contract.evaluate import Item
from logitjudge.rubrics import evaluate
from logitjudge.rubrics.entities import check_entities, entities_of, find_in, has_number, normalise
from logitjudge.rubrics.kinds import kind_of
from logitjudge.rubrics.questions import chunk_group
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.runner import plan_item
from logitjudge.rubrics.scoring import count_distribution, level_of_share, share_levels

ITEM = {
    "id": "i",
    "input": "How is Jev priced?",
    "output": "Jev costs $42 per billion input tokens.",
    "expected": "$42 per billion input tokens (Jev, 2024).",
    "context": ["Price: $42 per billion input tokens.", "SECRET-PELICAN founded in 2024."],
}


def build_groups(defn, item):
    """The groups ``defn``'s kind asks ``item``'s questions in (state, questions by key)."""
    return kind_of(defn).questions(defn, item).groups


def test_each_chunk_is_its_own_request_and_holds_only_that_chunk():
    reg = default_registry()
    plan = plan_item(Item.model_validate(ITEM), reg.select(["chunk_relevance", "chunk_support@3"]), strict=True)
    keyed = dict(plan.engine_requests())
    assert set(keyed) == {chunk_group(0), chunk_group(1), "null"}
    assert keyed[chunk_group(0)].state == "Passage: Price: $42 per billion input tokens."
    assert "SECRET-PELICAN" not in str(keyed[chunk_group(0)]) and "SECRET-PELICAN" not in str(keyed["null"])
    # both evaluators' questions over chunk 0 share its one request (its tokens run once)
    kinds = [q.type for q in keyed[chunk_group(0)].questions]
    assert kinds.count("continuation") == 1 and kinds.count("noul") == 1 + 3
    assert all(not q.calibrated for r in keyed.values() for q in r.questions)


def test_entity_recall_sees_the_context_only_and_asks_only_about_unmatched_entities():
    defn = default_registry().get("context_entity_recall")
    groups = build_groups(defn, Item.model_validate(ITEM))
    ((state, questions),) = groups.values()
    assert state == {"context": ITEM["context"]}  # no output, no expected in the state
    assert [q.instructions for q in questions.values()] == [
        defn.entity_template.replace("{entity}", '"Jev"')  # $42 and 2024 are found verbatim
    ]


def test_v2_results_keep_the_pages_shape(scripted):
    judge = scripted(lambda state, q: [0.9] if q.type == "continuation" else [0.8, 0.2][: len(q.options)])
    run = evaluate(judge, [ITEM], ["chunk_relevance", "chunk_support", "context_entity_recall"])
    res = run.results[0].results
    cr = res["chunk_relevance"]
    assert cr.version == "2" and cr.label.endswith("% yes") and set(cr.probabilities) == {"yes", "no"}
    assert len(cr.details) == 2 and all(d.x_features for d in cr.details)
    cs = res["chunk_support"]
    assert cs.label in ("supports", "contradicts", "unrelated")
    assert set(cs.probabilities) == {"supports", "contradicts", "unrelated"}
    assert math.isclose(sum(cs.probabilities.values()), 1.0)
    er = res["context_entity_recall"]
    assert er.label.endswith("/ 3") and set(er.probabilities) == {"0", "1", "2", "3"}


def test_name_at_version_runs_the_earlier_version(scripted):
    judge = scripted(lambda state, q: [0.8, 0.2])
    run = evaluate(judge, [ITEM], ["chunk_relevance@1"])
    res = run.results[0].results["chunk_relevance"]
    assert res.version == "1" and res.label == "2/2 relevant"
    assert isinstance(judge.engine.calls[0][0].state, dict)  # version 1: one request over the whole item


@pytest.mark.parametrize(
    ("text", "entities"),
    [
        ("no (from Laleli Mosque and Esma Sultan Mansion)", ["Laleli Mosque", "Esma Sultan Mansion"]),
        ("The Eiffel Tower was completed on 31 March 1889 in Paris.", ["Eiffel Tower", "31 March 1889", "Paris"]),
        ("$0.042 per million input tokens; output tokens are free.", ["$0.042"]),
        ('It sold 1,378,000 copies of "Hello", by Adele.', ["1,378,000", "Hello", "Adele"]),
        ("yes", []),
    ],
)
def test_entities_of(text, entities):
    assert entities_of(text) == entities


def test_find_in_normalises_case_accents_and_thousands_but_needs_whole_words():
    assert find_in("1,378,000", "it has sold 1378000 copies")
    assert find_in("Esma Sultan", "the ESMA SULTÁN mansion")
    assert find_in("$0.042", "($0.042 per million)")
    assert not find_in("Winner", "the winners were")
    assert not find_in("0.042", "0 042")
    assert normalise("A-b") == " a b "


def test_a_number_cannot_be_present_where_the_context_states_none():
    assert has_number("in the third quarter") and has_number("sold 12 copies") and not has_number("It is free.")
    checks = check_entities("$0.042 per million input tokens; Jev is free.", "Output tokens are free.")
    assert [(c.entity, c.status) for c in checks] == [("$0.042", "no number"), ("Jev", "ask")]
    # a context with a number word leaves the numbered entity to the model (Q3 / third quarter)
    assert [c.status for c in check_entities("It grew in Q3.", "It grew in the third quarter.")] == ["ask"]
    assert [c.status for c in check_entities("It grew in Q3.", "Revenue grew in Q3 2024.")] == ["verbatim"]


def test_levels_from_the_share_present():
    assert [level_of_share(k, 3) for k in range(4)] == [0, 1, 2, 3]
    assert [level_of_share(k, 2) for k in range(3)] == [0, 2, 3]
    assert count_distribution([0.5, 0.5]) == pytest.approx([0.25, 0.5, 0.25])
    assert share_levels([1.0, 1.0, 0.0], 3) == pytest.approx([0, 0, 1, 0])
    # one entity found, one 50/50: level 3 or 2 with even odds (2 of 2 -> 3, 1 of 2 -> 2)
    assert share_levels([1.0, 0.5], 3) == pytest.approx([0, 0, 0.5, 0.5])


PADDED = {
    "input": "What is the minimum Node version for the SDK?",
    "output": "Node 20 or newer. As background, the SDK ships ESM and CommonJS builds.",
}


def test_answer_relevancy_sees_the_output_alone_each_sentence_and_a_content_free_output():
    defn = default_registry().get("answer_relevancy")
    groups = build_groups(defn, Item.model_validate(dict(PADDED, context=["SECRET-PELICAN"], expected="x")))
    states = {key: state for key, (state, _) in groups.items()}
    assert states == {
        "answer": "Answer: " + PADDED["output"],
        "answer:null": "Answer: N/A",
        "answer:s0": "Answer: Node 20 or newer.",
        "answer:s1": "Answer: As background, the SDK ships ESM and CommonJS builds.",
    }
    questions = [q for _, qs in groups.values() for q in qs.values()]
    assert all(q.type == "noul" and not q.calibrated and '"What is the minimum' in q.instructions for q in questions)
    # one sentence: no sentence requests (its padding gap is 0 by definition)
    one = build_groups(defn, Item.model_validate(dict(PADDED, output="Node 20 or newer.")))
    assert set(one) == {"answer", "answer:null"}


def test_answer_relevancy_levels_are_the_softmax_of_the_fitted_class_scores(scripted):
    judge = scripted(lambda state, q: [0.8, 0.2])
    res = (
        evaluate(judge, [dict(PADDED, output="Node 20.")], ["answer_relevancy"]).results[0].results["answer_relevancy"]
    )
    classes = default_registry().get("answer_relevancy").classes
    z = [
        classes[str(k)].intercept + sum(w * res.x_features[f] for f, w in classes[str(k)].weights.items())
        for k in range(4)
    ]
    expected = [math.exp(v) / sum(math.exp(u) for u in z) for v in z]
    assert [res.probabilities[str(k)] for k in range(4)] == pytest.approx(expected)
    # P(yes) 0.8 everywhere, the null output included: every _rel feature is 0, pad 0 (one sentence)
    assert res.x_features == pytest.approx(
        {"answers": math.log(4), "answers_rel": 0, "complete": math.log(4), "complete_rel": 0, "pad": 0}
    )
    level = sum(k * p for k, p in enumerate(expected))
    assert res.score == pytest.approx(level / 3) and res.label == f"{math.floor(level * 10) / 10:.1f} / 3"


def test_answer_relevancy_padding_lowers_the_level(scripted):
    """An answer the whole-answer probes call relevant (P(yes) 0.9 against 0.1 for the
    content-free output, as on a good WikiEval answer): a sentence that helps much less than the
    best one (P(yes) 0.1 against 0.9) lowers its level: the fitted classes' ``pad`` weights."""

    def answers(state, q):
        low = "N/A" in str(state) or ("As background" in str(state) and "text in the state" in q.instructions)
        return [0.1, 0.9] if low else [0.9, 0.1]

    judge = scripted(answers)
    focused_output = "Node 20 or newer. It needs at least that version."
    run = evaluate(judge, [PADDED, dict(PADDED, output=focused_output)], ["answer_relevancy"])
    padded, focused = (r.results["answer_relevancy"] for r in run.results)
    assert padded.x_features["pad"] == pytest.approx(2 * math.log(9)) and focused.x_features["pad"] == 0
    assert padded.x_features["answers_rel"] == pytest.approx(2 * math.log(9))
    assert padded.score < focused.score and padded.passed is False and focused.passed is True
    assert padded.label.endswith("/ 3") and len(padded.details) == 2


def test_chunk_support_asks_per_claim_and_a_chunk_is_judged_by_the_claim_it_speaks_to(scripted):
    item = {"output": "The office is in Berlin; it opened in 2019.", "context": ["It opened in 2019.", "Dogs bark."]}
    defn = default_registry().get("chunk_support@3")
    groups = build_groups(defn, Item.model_validate(item))
    asked = [q.instructions for q in groups[chunk_group(0)][1].values()]
    assert len(asked) == 2 * 3 and any('"it opened in 2019."' in a for a in asked)
    assert any('"The office is in Berlin"' in a for a in asked)

    def answers(state, q):
        shows = "2019" in str(state) and '"it opened in 2019."' in q.instructions and "is true" in q.instructions
        return [0.95, 0.05] if shows else [0.2, 0.8]

    res = evaluate(scripted(answers), [item], ["chunk_support@3"]).results[0].results["chunk_support"]
    first, second = res.details
    assert first.label == "supports" and first.x_features["claim"] == 1
    assert second.label != "supports"
