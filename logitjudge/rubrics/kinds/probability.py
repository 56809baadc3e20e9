"""``probability``: one yes/no question over the item; score = P(yes), or with ``contrast`` how
much the context raises it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult
from logitjudge.engine.answers import decisiveness, noul_distribution
from logitjudge.rubrics.kinds.base import SequenceKind
from logitjudge.rubrics.results import Answered, base_fields, contrast_probability, percent_label, yes_no

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["Probability", "score_probability"]


def score_probability(
    defn: EvaluatorDef,
    answers: Sequence[Answered],
    threshold: float,
    baseline: Sequence[Answered] | None = None,
    scaling: Scaling | None = None,
) -> EvaluatorResult:
    """One noul: score = p(yes); passed when score >= threshold.

    With ``baseline`` (the same question over the state without ``context``, for an evaluator
    with ``contrast: "context"``), score = :func:`~logitjudge.rubrics.results.contrast_probability`
    of the two, and both P(yes) are reported (``x_p_yes_with_context``, ``x_p_yes_without_context``).
    With ``scaling`` (the calibration's scaling of this evaluator's score, Platt scaling: see
    :mod:`logitjudge.engine.calibration`), score = ``scaling.apply(noul_distribution(p))[0]``; the score
    before it is ``x_score_uncalibrated``.
    """
    (answer,) = answers
    p = p_with = answer.p_yes()
    p_without = None
    if baseline is not None:
        (base,) = baseline
        p_without = base.p_yes()
        p = contrast_probability(p_with, p_without)
    uncalibrated = None
    if scaling is not None:
        uncalibrated, p = p, float(scaling.apply(noul_distribution(p))[0])
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=p,
        label=percent_label(p),
        confidence=decisiveness(p),
        probabilities=yes_no(p),
        passed=p >= threshold,
        x_p_yes_with_context=None if p_without is None else p_with,
        x_p_yes_without_context=p_without,
        x_score_uncalibrated=uncalibrated,
    )


class Probability(SequenceKind):
    """One noul over the item (or ``state_fields``): :func:`score_probability`."""

    name = "probability"
    question_type = "noul"
    fields: ClassVar[Mapping[str, bool]] = {"contrast": False}
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
        return score_probability(defn, answers, threshold, baseline, scaling)
