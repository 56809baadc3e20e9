"""Readout: label ids at the real prompt boundary, 255 options and 10 levels, multi-token labels,
and the confidence formulas against the spec's worked numbers (spec/api.md A.7)."""

from __future__ import annotations

import pytest

from logitjudge.engine import answers as fields
from logitjudge.engine.prompt import is_prefix_free
from logitjudge.engine.types import EngineRequest, Option, Question


def test_labels_are_single_tokens_at_the_boundary(default_engine):
    pb = default_engine.prompt
    tok = pb.tokenizer
    for text, ids in zip(pb.choice_label_texts, pb.choice_labels):
        full = tok(pb.tail_text + text, add_special_tokens=False)["input_ids"]
        assert full == pb.tail_ids + list(ids) and len(ids) == 1
    assert len({ids for ids in pb.choice_labels}) == len(pb.choice_labels)
    # A..Z then the single-token uppercase pairs: 26 + 377 on SmolLM2, and "AJ" is not one of them
    assert pb.choice_label_texts[:26] == tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert len(pb.choice_labels) == 26 + 377
    assert "AJ" not in pb.choice_label_texts
    assert [len(x) for x in pb.noul_labels] == [1, 1] and len(set(pb.score_labels)) == 10


def q_choice(n: int) -> Question:
    return Question(
        "choice",
        "Pick the queue.",
        tuple(Option("Billing" if i == 0 else f"Queue {i:03d}", f"team {i}") for i in range(n)),
    )


def test_255_options_and_10_levels_on_the_default_model(default_engine):
    req = EngineRequest(
        "A customer cannot pay an invoice.",
        (
            q_choice(255),
            Question("score", "How urgent?", tuple(Option(str(i), f"level {i}") for i in range(10))),
        ),
    )
    res = default_engine.run_batch([req])[0]
    choice, levels = res.answers
    assert len(choice.probabilities) == 255 and abs(sum(choice.probabilities) - 1) < 1e-6
    assert len(levels.probabilities) == 10 and abs(sum(levels.probabilities) - 1) < 1e-6


def test_multi_token_labels_scored_exactly_as_extra_branches(make_tiny):
    """A tokenizer with too few single-token labels gets fixed-width numbers (several tokens each),
    scored as the sum of their tokens' log-probabilities; packed equals separate passes."""
    engine = make_tiny("llama", max_single_token_labels=8)
    q = q_choice(40)  # needs 40 labels, only 8 single-token ones allowed -> "01".."40"
    views = engine.prompt.views(q)
    assert all(len(lab) == 2 for lab in views[0].labels) and is_prefix_free(views[0].labels)
    plan = engine.plan(
        EngineRequest("Some state text.", (q, Question("noul", "Ok?", (Option("true"), Option("false")))))
    )
    for strategy in ("packed", "prefix_packed", "prefix_rows"):
        got = engine.run_plans([plan], strategy)[0].answers
        ref = engine.run_plans([plan], "separate")[0].answers
        assert max(abs(a - b) for x, y in zip(got, ref) for a, b in zip(x.probabilities, y.probabilities)) <= 1e-4
    assert abs(sum(got[0].probabilities) - 1) < 1e-6
    assert 0 < got[0].option_mass <= 1


def test_255_options_with_multi_token_labels(make_tiny):
    engine = make_tiny("llama", max_single_token_labels=0)
    res = engine.run_batch([EngineRequest("State.", (q_choice(255),))])[0]
    assert len(res.answers[0].probabilities) == 255 and abs(sum(res.answers[0].probabilities) - 1) < 1e-6


@pytest.mark.parametrize(
    "probs,expected",
    [
        ([0.88, 0.12], 0.76),  # spec A.6.4 / jc-SPEC example
        ([0.5, 0.5], 0.0),
        ([1.0, 0.0, 0.0], 1.0),
        ([0.6, 0.3, 0.1], (3 * 0.6 - 1) / 2),  # three options: (3m - 1)/2
    ],
)
def test_choice_confidence(probs, expected):
    assert fields.choice_confidence(probs) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    "probs,expected",
    [
        ([0.0, 0.95, 0.05], 0.925),  # spec A.7 worked example
        ([1.0, 0.0], 1.0),
        ([0.5, 0.5], 0.0),  # D(2) = 0.5, spread 0.5
        ([0.25, 0.25, 0.25, 0.25], 0.0),  # uniform: spread equals D ... clipped at 0
    ],
)
def test_score_confidence(probs, expected):
    assert fields.score_confidence(probs) == pytest.approx(expected, abs=1e-9)


def test_uniform_dispersion_table():
    table = [0.5, 0.6667, 1.0, 1.2, 1.5, 1.7143, 2.0, 2.2222, 2.5]  # spec A.7, n = 2..10
    assert [round(fields.score_dispersion_of_uniform(n), 4) for n in range(2, 11)] == table


def test_expected_score_and_argmax():
    assert fields.expected_score([0.0, 0.95, 0.05]) == pytest.approx(1.05)
    assert fields.argmax([0.4, 0.4, 0.2]) == 0  # ties go to request order
