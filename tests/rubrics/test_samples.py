"""Labelled distributions read from result rows: a System One answer's sample comes from its
question type's record, for every type on the wire."""

from __future__ import annotations

import pytest

from logitjudge.rubrics.samples import samples_from_row


def _row(answer: dict, gold: object, unknown: bool = False) -> dict:
    return {
        "id": "r1",
        "results": {"q": {"status": "ok", "answer": answer}},
        "gold": {"answer": gold, "unknown": unknown},
    }


@pytest.mark.parametrize(
    ("answer", "gold", "probs", "gold_index"),
    [
        ({"type": "noul", "noul": 0.8}, True, (0.8, 0.2), 0),
        ({"type": "choice", "choice": "b", "probabilities": {"a": 0.3, "b": 0.7}}, "b", (0.3, 0.7), 1),
        ({"type": "score", "score": 1.4, "probabilities": {"1": 0.5, "0": 0.1, "2": 0.4}}, 0, (0.1, 0.5, 0.4), 0),
    ],
)
def test_a_typed_answer_gives_its_distribution_and_gold_option(answer, gold, probs, gold_index):
    (sample,) = samples_from_row(_row(answer, gold))
    assert sample.type == answer["type"] and sample.source == "q"
    assert sample.probs == pytest.approx(probs) and sample.gold == gold_index


def test_a_gold_answer_that_does_not_fit_or_is_unknown_gives_no_sample():
    assert samples_from_row(_row({"type": "noul", "noul": 0.8}, "yes")) == []
    assert samples_from_row(_row({"type": "choice", "probabilities": {"a": 1.0}}, "z")) == []
    assert samples_from_row(_row({"type": "noul", "noul": 0.8}, True, unknown=True)) == []
    assert samples_from_row(_row({"type": "ranking", "probabilities": {"a": 1.0}}, "a")) == []  # no such type
