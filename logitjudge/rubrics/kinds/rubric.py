"""``rubric``: one score question over the item; score = E[level] / (L - 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from logitjudge.contract.evaluate import EvaluatorResult
from logitjudge.engine.answers import noul_distribution
from logitjudge.rubrics.kinds.base import SequenceKind
from logitjudge.rubrics.results import Answered, base_fields, clip01, rubric_fields

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["Rubric", "score_rubric"]


def score_rubric(
    defn: EvaluatorDef, answers: Sequence[Answered], threshold: float, scaling: Scaling | None = None
) -> EvaluatorResult:
    """One score question with L levels: score = E[level]/(L-1); passed when score >= threshold.

    With ``scaling`` (the calibration's scaling of this evaluator's score, Platt scaling: see
    :mod:`logitjudge.engine.calibration`), score = ``scaling.apply(noul_distribution(s))[0]``, the
    probability that the item passes; ``x_score_uncalibrated`` = E[level]/(L-1). The label (the
    expected level), ``probabilities`` (per level) and ``confidence`` stay the score answer's.
    """
    (answer,) = answers
    fields = rubric_fields(answer)
    uncalibrated = None
    if scaling is not None:
        uncalibrated = fields["score"]
        fields["score"] = clip01(scaling.apply(noul_distribution(uncalibrated))[0])
    return EvaluatorResult(
        **base_fields(defn, threshold), **fields, passed=fields["score"] >= threshold, x_score_uncalibrated=uncalibrated
    )


class Rubric(SequenceKind):
    """One score question over the item (or ``state_fields``): :func:`score_rubric`."""

    name = "rubric"
    question_type = "score"
    scaled = True
    reads_own_head = True

    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_rubric(defn, answers, threshold, scaling)
