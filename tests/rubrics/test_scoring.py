"""Every evaluator's questions and scoring against hand-computed answers for fixed probabilities.

The engine is scripted (fixed probabilities per question); what is tested is the rubric layer:
the questions generated, and the arithmetic from answers to score / label / confidence /
probabilities / passed / details, including each evaluator page's worked example.
"""

from __future__ import annotations

import math

import pytest

from logitjudge.engine.types import Answer, Option, Question
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.scoring import Answered, level_label, percent_label, score_answers

FULL = {
    "id": "full",
    "input": "How is Jev priced, and are output tokens billed?",
    "output": "Jev is billed per input token at $0.042 per million; output tokens are free.",
    "expected": "$0.042 per million input tokens; output tokens are free.",
    "context": ["Price: $42 per billion input tokens. Output tokens are free.", "Founded in 2024."],
}


def _one(judge, item, name, **kw):
    """``name`` may pin a version (``chunk_relevance@1``: the page's question, scored as version 1)."""
    run = evaluate(judge, [item], [name], **kw)
    return run.results[0].results[name.split("@")[0]]


# -- the pages' worked examples ------------------------------------------------------------------


def test_chunk_relevance_page_example_precision_2_of_4(scripted):
    """Page: 4 chunks, chunks 1 and 4 relevant, 2 and 3 not: precision 2/4."""
    item = {
        "evaluators": ["chunk_relevance"],
        "input": "How is Jev priced, and are output tokens billed?",
        "output": "…",
        "context": [
            "Price: $42 per billion input tokens. Output tokens are free.",
            "Rate limits: 1,200 rpm.",
            "Founded in 2024.",
            "Output billed at $8/M on the legacy v0 endpoint, deprecated.",
        ],
    }
    p_yes = {0: 0.9, 1: 0.2, 2: 0.1, 3: 0.7}
    asked = []

    def script(state, q):
        asked.append(q.instructions)
        i = next(i for i in range(4) if f"`context[{i}]`" in q.instructions)
        return [p_yes[i], 1 - p_yes[i]]

    r = _one(scripted(script), item, "chunk_relevance@1")
    assert asked == [
        f"`context[{i}]` contains information that helps answer `input` (or supports `expected` if present). "
        "Judge this chunk on its own."
        for i in range(4)
    ]
    assert r.status == "ok"
    assert r.score == 0.5
    assert r.label == "2/4 relevant"
    assert r.passed is True  # passed at 0.5
    assert [d.passed for d in r.details] == [True, False, False, True]
    assert [d.label for d in r.details] == ["90% yes", "20% yes", "10% yes", "70% yes"]
    assert [d.probability for d in r.details] == pytest.approx([0.9, 0.2, 0.1, 0.7])
    assert [d.confidence for d in r.details] == pytest.approx([0.8, 0.6, 0.8, 0.4])
    assert r.confidence == pytest.approx((0.8 + 0.6 + 0.8 + 0.4) / 4)
    assert r.probabilities == {"yes": 0.5, "no": 0.5}
    assert r.x_soft_score == pytest.approx((0.9 + 0.2 + 0.1 + 0.7) / 4)


def test_chunk_support_page_example(scripted):
    """Page: chunk 1 supports, chunk 2 unrelated, chunk 3 contradicts -> score 0, fails."""
    item = {
        "output": "Jev is billed per input token at $0.042 per million; output tokens are free.",
        "context": [
            "Price: $42 per billion input tokens. Output tokens are free.",
            "Founded in 2024.",
            "Output billed at $8/M on the legacy v0 endpoint.",
        ],
    }
    dist = {0: [0.8, 0.1, 0.1], 1: [0.1, 0.2, 0.7], 2: [0.3, 0.6, 0.1]}  # supports, contradicts, unrelated

    def script(state, q):
        assert [o.name for o in q.options] == ["supports", "contradicts", "unrelated"]
        assert q.options[1].description == "The chunk contradicts one or more claims in the output"
        i = next(i for i in range(3) if f"`context[{i}]`" in q.instructions)
        return dist[i]

    r = _one(scripted(script), item, "chunk_support@1")
    assert [d.label for d in r.details] == ["supports", "unrelated", "contradicts"]
    assert r.score == 0.0  # max(0, (1 - 1) / 3)
    assert r.passed is False  # a single contradiction fails the check
    assert r.label == "1 supports, 1 contradicts, 1 unrelated"
    assert r.probabilities == pytest.approx({"supports": 1 / 3, "contradicts": 1 / 3, "unrelated": 1 / 3})
    # choice confidence (m - 1/3) / (2/3): 0.8 -> 0.7, 0.7 -> 0.55, 0.6 -> 0.4
    assert [d.confidence for d in r.details] == pytest.approx([0.7, 0.55, 0.4])
    assert r.confidence == pytest.approx((0.7 + 0.55 + 0.4) / 3)
    assert [d.score for d in r.details] == [1.0, 0.5, 0.0]
    assert [d.passed for d in r.details] == [True, True, False]
    assert r.details[2].probabilities == pytest.approx({"supports": 0.3, "contradicts": 0.6, "unrelated": 0.1})


def test_chunk_support_score_clips_at_zero_and_passes_without_contradiction(scripted):
    item = {"output": "o", "context": ["a", "b", "c", "d"]}
    labels = {0: [0.1, 0.8, 0.1], 1: [0.1, 0.8, 0.1], 2: [0.8, 0.1, 0.1], 3: [0.1, 0.1, 0.8]}
    r = _one(scripted(lambda s, q: labels[int(q.instructions.split("[")[1][0])]), item, "chunk_support@1")
    assert r.score == 0.0 and r.passed is False  # (1 - 2)/4 < 0 -> 0
    r2 = _one(
        scripted(lambda s, q: [0.1, 0.1, 0.8] if "[0]" in q.instructions else [0.6, 0.2, 0.2]),
        item,
        "chunk_support@1",
    )
    assert r2.score == 0.75 and r2.passed is True  # (3 - 0)/4


def test_answer_relevancy_page_example(scripted):
    """Page: levels 0/6/66/28% -> "2.2 / 3", confidence 66%, fails at the 75% threshold."""
    item = {
        "input": "What is the minimum Node version for the SDK?",
        "output": "Node 20 or newer. As background, the SDK ships ESM and CommonJS builds, "
        "includes TypeScript "
        "declarations, and many teams also use pnpm.",
    }
    r = _one(scripted(lambda s, q: [0.0, 0.06, 0.66, 0.28]), item, "answer_relevancy@1")
    assert r.score == pytest.approx(2.22 / 3)
    assert r.label == "2.2 / 3"
    assert r.confidence == pytest.approx(0.66)  # 1 - (0.06 + 0.28) / D(4)=1
    assert r.passed is False
    assert r.threshold == 0.75
    assert r.probabilities == pytest.approx({"0": 0.0, "1": 0.06, "2": 0.66, "3": 0.28})
    assert r.legend["0"] == "The output does not address the input question at all"


def test_context_entity_recall_page_example(scripted):
    """Page: 95% on "all present" -> "2.9 / 3", confidence 95%, passes."""
    item = {
        "expected": "$0.042 per million input tokens; output tokens are free.",
        "context": ["Price: $42 per billion input tokens ($0.042 per million). Output tokens are free."],
        "output": "…",
    }
    r = _one(scripted(lambda s, q: [0.0, 0.0, 0.05, 0.95]), item, "context_entity_recall@1")
    assert r.label == "2.9 / 3"  # 2.95 floored to one decimal, as the page shows
    assert r.confidence == pytest.approx(0.95)
    assert r.score == pytest.approx(2.95 / 3)
    assert r.passed is True


# -- every evaluator: question shape and arithmetic -----------------------------------------------

NOUL_EVALUATORS = ["possible"]  # faithfulness (contrast): test_faithfulness_scores_the_contrast
RUBRIC_EVALUATORS = [
    "answer_relevancy@1",  # version 2 probes the output (test_v2_evaluators.py)
    "context_entity_recall@1",  # version 2 counts entities (test_v2_evaluators.py)
    "answer_correctness",
    "context_recall",
    "context_relevancy",
    "conciseness",
    "task_completion",
]


@pytest.mark.parametrize("name", NOUL_EVALUATORS)
def test_noul_evaluators(scripted, name):
    seen = []

    def script(state, q):
        seen.append(q)
        return [0.83, 0.17]

    r = _one(scripted(script), FULL, name)
    (q,) = seen
    assert q.type == "noul"
    assert q.instructions == default_registry().get(name).template
    assert r.score == pytest.approx(0.83)
    assert r.label == "83% yes"
    assert r.confidence == pytest.approx(0.66)
    assert r.probabilities == pytest.approx({"yes": 0.83, "no": 0.17})
    assert r.passed is True
    low = _one(scripted(lambda s, q: [0.4, 0.6]), FULL, name)
    assert low.passed is False and low.label == "40% yes"


def test_faithfulness_scores_the_contrast(scripted):
    """faithfulness: the same question over the state with and without `context`; score =
    sigmoid(logit p - logit p0) (tests/rubrics/test_contrast.py has the arithmetic)."""
    seen = []

    def script(state, q):
        seen.append((sorted(state), q))
        return [0.8, 0.2] if "context" in state else [0.5, 0.5]

    r = _one(scripted(script), FULL, "faithfulness")
    (with_ctx, q1), (without, q2) = seen
    assert "context" in with_ctx and "context" not in without and q1 == q2
    assert q1.instructions == default_registry().get("faithfulness").template
    assert r.score == pytest.approx(0.8) and r.label == "80% yes" and r.passed is True
    assert (r.x_p_yes_with_context, r.x_p_yes_without_context) == (pytest.approx(0.8), pytest.approx(0.5))
    high_prior = _one(scripted(lambda s, q: [0.8, 0.2] if "context" in s else [0.95, 0.05]), FULL, "faithfulness")
    assert high_prior.passed is False and high_prior.score < 0.5


@pytest.mark.parametrize("name", RUBRIC_EVALUATORS)
def test_rubric_evaluators(scripted, name):
    seen = []

    def script(state, q):
        seen.append(q)
        return [0.1, 0.2, 0.3, 0.4]

    r = _one(scripted(script), FULL, name)
    (q,) = seen
    defn = default_registry().versions[name] if "@" in name else default_registry().get(name)
    assert q.type == "score" and [o.description for o in q.options] == list(defn.levels)
    # E = 0.2 + 0.6 + 1.2 = 2.0 -> 2/3; mode 3, spread = 0.1*3 + 0.2*2 + 0.3*1 = 1.0, D = 1 -> 0
    assert r.score == pytest.approx(2 / 3)
    assert r.label == "2.0 / 3"
    assert r.confidence == pytest.approx(0.0)
    assert r.passed is False
    assert _one(scripted(script), FULL, name, thresholds={name.split("@")[0]: 0.6}).passed is True


def test_threshold_boundary_is_inclusive(scripted):
    r = _one(scripted(lambda s, q: [0.0, 0.0, 0.75, 0.25]), FULL, "task_completion")
    assert r.score == 0.75 and r.passed is True  # 2.25 / 3 == 0.75, "passed at 75% of the scale"


def test_every_evaluator_runs_on_a_full_item_with_finite_numbers(scripted):
    run = evaluate(scripted(lambda s, q: [1.0] * len(q.options)), [FULL], ["Everything"])
    results = run.results[0].results
    assert list(results) == [s.name for s in default_registry().select(["Everything"])]
    for r in results.values():
        assert r.status == "ok", r
        for v in [r.score, r.confidence, *(r.probabilities or {}).values()]:
            assert v is not None and math.isfinite(v)


# -- typed questions (the data sets' generic rows) -----------------------------------------------


def test_typed_question_noul_choice_score(scripted):
    items = [
        {"id": "n", "input": "ticket", "question": {"key": "k", "type": "noul", "instructions": "Angry?"}},
        {
            "id": "c",
            "input": "ticket",
            "question": {
                "type": "choice",
                "instructions": "Queue?",
                "criteria": {"billing": "money", "sales": None},
            },
        },
        {
            "id": "s",
            "input": "ticket",
            "question": {"type": "score", "instructions": "Priority?", "criteria": ["low", "mid", "high"]},
        },
    ]
    probs = {"noul": [0.3, 0.7], "choice": [0.25, 0.75], "score": [0.0, 0.95, 0.05]}
    run = evaluate(scripted(lambda s, q: probs[q.type]), items, "auto")
    n, c, s = (r.results["typed_question"] for r in run.results)
    assert (n.score, n.label, n.passed) == (pytest.approx(0.3), "30% yes", None)
    assert n.answer == {"type": "noul", "noul": pytest.approx(0.3), "x_option_mass": 1.0}
    assert c.score is None and c.label == "sales" and c.confidence == pytest.approx(0.5)
    assert "no 0..1 score" in c.reason
    assert s.score == pytest.approx(1.05 / 2) and s.label == "1.0 / 2" and s.confidence == pytest.approx(0.925)


def test_invalid_typed_question_is_an_error_result_in_datasets(scripted):
    run = evaluate(scripted(lambda s, q: [1, 1]), [{"input": "x", "question": {"type": "boolean"}}], ["typed_question"])
    r = run.results[0].results["typed_question"]
    assert r.status == "error" and "question" in r.reason


# -- label helpers ----------------------------------------------------------------------------------


def test_labels():
    assert percent_label(0.834) == "83% yes"
    assert percent_label(0.835) == "84% yes"
    assert percent_label(1.0) == "100% yes"
    assert level_label(2.95, 3) == "2.9 / 3"
    assert level_label(3.0, 3) == "3.0 / 3"
    assert level_label(2.2999999999, 3) == "2.3 / 3"


NOUL = Question("noul", "Grounded?", (Option("true"), Option("false")))


def test_score_answers_is_pure():
    defn = default_registry().get("faithfulness")
    answer = Answered(NOUL, Answer("noul", (0.25, 0.75), option_mass=1.0))
    even = Answered(NOUL, Answer("noul", (0.5, 0.5), option_mass=1.0))
    a = score_answers(defn, [answer], baseline=[even])
    b = score_answers(defn, [answer], baseline=[even])
    assert a == b and answer == Answered(NOUL, Answer("noul", (0.25, 0.75), option_mass=1.0))
    assert a.score == pytest.approx(0.25) and a.passed is False
    assert score_answers(defn, [answer], threshold=0.2, baseline=[even]).passed is True
    with pytest.raises(ValueError, match="contrast"):  # faithfulness's contrast needs its baseline
        score_answers(defn, [answer])


def test_score_answers_reads_typed_answers_with_their_questions():
    """Choice, expected level and confidence come from the probabilities and the question's options
    (spec A.7), as ``POST /v1/systemone`` computes them; no wire dict is read."""
    reg = default_registry()
    support = reg.versions["chunk_support@1"]
    choice = Question("choice", "?", tuple(Option(o.name, o.description) for o in support.options or ()))
    names = [o.name for o in choice.options]
    probs = {"supports": 0.3, "contradicts": 0.6, "unrelated": 0.1}
    r = score_answers(support, [Answered(choice, Answer("choice", tuple(probs[n] for n in names), 0.9))])
    assert r.details is not None and r.details[0].label == "contradicts" and r.passed is False
    assert r.details[0].confidence == pytest.approx((0.6 - 1 / 3) / (1 - 1 / 3))
    assert r.details[0].probabilities == pytest.approx(probs)
    relevancy = reg.versions["answer_relevancy@1"]
    levels = Question("score", "?", tuple(Option(str(i), lv) for i, lv in enumerate(relevancy.levels or ())))
    r = score_answers(relevancy, [Answered(levels, Answer("score", (0.0, 0.06, 0.66, 0.28), 1.0))])
    assert r.score == pytest.approx((0.06 + 2 * 0.66 + 3 * 0.28) / 3) and r.label == "2.2 / 3"
    assert r.legend == {str(i): lv for i, lv in enumerate(relevancy.levels or ())}
    with pytest.raises(ValueError):  # a noul evaluator given a score answer
        score_answers(reg.get("faithfulness"), [Answered(levels, Answer("score", (0.0, 0.06, 0.66, 0.28), 1.0))])
