"""``typed_question``: the item's own System One question, answered as asked (no pass rule)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from logitjudge.contract.evaluate import EvaluatorResult
from logitjudge.convert import answer_to_wire
from logitjudge.engine.answers import decisiveness
from logitjudge.rubrics.kinds.base import SequenceKind
from logitjudge.rubrics.results import Answered, base_fields, choice_fields, percent_label, rubric_fields, yes_no

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["TypedQuestion", "score_typed_question"]


def score_typed_question(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """The item's own question, reported as answered; ``answer`` holds the System One answer
    (the wire answer ``POST /v1/systemone`` gives, :func:`logitjudge.convert.answer_to_wire`).

    noul: score = p(yes), label "nn% yes"; score question: score = E[level]/(L-1), label
    "x.x / L-1"; choice: label = the chosen option, score null (options are not ordered).
    ``passed`` is null: a typed question has no pass rule (compare with your gold answer).
    """
    (answer,) = answers
    wire = answer_to_wire(answer.question, answer.answer).model_dump(mode="json", exclude_none=True)
    base = {**base_fields(defn, threshold), "answer": wire, "passed": None}
    why = "a typed question has no pass rule; compare its answer with the gold answer"
    if answer.question.type == "noul":
        p = answer.p_yes()
        return EvaluatorResult(
            **base,
            score=p,
            label=percent_label(p),
            confidence=decisiveness(p),
            probabilities=yes_no(p),
            reason=why,
        )
    if answer.question.type == "score":
        return EvaluatorResult(**base, **rubric_fields(answer), reason=why)
    return EvaluatorResult(
        **base,
        score=None,
        **choice_fields(answer),
        reason="a choice question has unordered options, so no 0..1 score and no pass rule",
    )


class TypedQuestion(SequenceKind):
    """The item's ``question`` (a System One noul, choice or score question) over its state:
    :func:`score_typed_question`. Its answers are batch-debiased under ``debias="batch"``."""

    name = "typed_question"
    question_type = "typed"
    needs_template = False
    batch_debiased = True

    def check(self, defn: EvaluatorDef) -> None:
        if defn.template is not None or "question" not in defn.required:
            raise ValueError(f"{defn.name}: a typed evaluator has no template and requires `question`")

    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_typed_question(defn, answers, threshold)
