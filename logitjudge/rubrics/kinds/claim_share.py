"""``claim_share``: one yes/no question per claim (sentence) of the output; score = the mean
P(supported), or with ``contrast`` the mean of how much the context raises it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult
from logitjudge.rubrics.kinds.base import SequenceKind
from logitjudge.rubrics.results import Answered, base_fields, contrast_probability, yes_no, yes_no_detail

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ClaimShare", "score_claim_share"]


def score_claim_share(
    defn: EvaluatorDef, answers: Sequence[Answered], threshold: float, baseline: Sequence[Answered] | None = None
) -> EvaluatorResult:
    """One noul per claim of the output: score = the mean P(supported) of the N claims.

    The expected share of supported claims (RAGAS faithfulness, Es et al. 2024, "RAGAS:
    Automated Evaluation of Retrieval Augmented Generation", with the model's P(yes) in place
    of a generated verdict per statement); a claim counts as supported in the label when
    p_i >= 0.5. With ``baseline`` (``contrast: "context"``), p_i is the
    :func:`~logitjudge.rubrics.results.contrast_probability` of claim i with and without the
    context, and ``x_p_yes_with_context`` / ``x_p_yes_without_context`` are the mean P(yes) of
    the claims over each state. ``details``: one per claim, in sentence order (``index`` = the
    claim's; ``score`` = p_i, ``probability`` = its P(yes) with the context); ``x_min_score`` =
    the weakest claim's p_i (a detector of the one unsupported claim).
    """
    with_context = [a.p_yes() for a in answers]
    ps, without = with_context, None
    if baseline is not None:
        without = [b.p_yes() for b in baseline]
        ps = [contrast_probability(p, p0) for p, p0 in zip(with_context, without, strict=True)]
    details = [yes_no_detail(i, p, q) for i, (p, q) in enumerate(zip(ps, with_context, strict=True))]
    n = len(details)
    score = sum(ps) / n
    supported = sum(d.passed for d in details)
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=score,
        label=f"{supported}/{n} claims supported",
        confidence=sum(d.confidence for d in details) / n,
        probabilities=yes_no(score),
        passed=score >= threshold,
        details=details,
        x_min_score=min(ps),
        x_p_yes_with_context=None if without is None else sum(with_context) / n,
        x_p_yes_without_context=None if without is None else sum(without) / n,
    )


class ClaimShare(SequenceKind):
    """A noul per claim of ``output`` (its sentences, :func:`~logitjudge.rubrics.questions.claims_of`;
    ``{claim}`` in the template quotes each): :func:`score_claim_share`."""

    name = "claim_share"
    question_type = "noul"
    per_claim = True
    fields: ClassVar[Mapping[str, bool]] = {"contrast": False}

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        return frozenset({"claim"})

    def check(self, defn: EvaluatorDef) -> None:
        if "output" not in defn.required or "{claim}" not in (defn.template or ""):
            raise ValueError(f"{defn.name}: a per-claim evaluator must require `output` and quote `{{claim}}`")

    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_claim_share(defn, answers, threshold, baseline)
