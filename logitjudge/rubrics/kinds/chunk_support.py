"""``chunk_support``: one choice per chunk (supports / contradicts / unrelated) over the whole
item; score = max(0, (S - C) / N), any contradiction fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from logitjudge.contract.evaluate import ChunkDetail, EvaluatorResult
from logitjudge.rubrics.kinds.base import SequenceKind, need_support_options
from logitjudge.rubrics.results import CHUNK_SUPPORT_SCORES, Answered, base_fields, choice_fields

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ChunkSupport", "score_chunk_support"]


def score_chunk_support(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """One choice per chunk (supports / contradicts / unrelated); score = max(0, (S - C) / N).

    A single contradicting chunk fails the check [docs]; otherwise passed when score >= threshold
    (default 0, so any result without a contradiction passes). ``probabilities`` is the share of
    chunks per option.
    """
    names = [o.name for o in defn.options or ()]
    details = []
    for i, answer in enumerate(answers):
        fields = choice_fields(answer)
        label = fields["label"]
        details.append(
            ChunkDetail(
                index=i,
                **fields,
                score=CHUNK_SUPPORT_SCORES.get(label, 0.5),
                passed=label != "contradicts",
            )
        )
    n = len(details)
    counts = {name: sum(d.label == name for d in details) for name in names}
    score = max(0.0, (counts["supports"] - counts["contradicts"]) / n)
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=score,
        label=", ".join(f"{counts[name]} {name}" for name in names),
        confidence=sum(d.confidence for d in details) / n,
        probabilities={name: counts[name] / n for name in names},
        passed=counts["contradicts"] == 0 and score >= threshold,
        details=details,
    )


class ChunkSupport(SequenceKind):
    """A choice per chunk over the whole item (`` `context[i]` `` names the chunk):
    :func:`score_chunk_support`. (Over each chunk alone: ``chunk_probes`` or ``chunk_head``.)"""

    name = "chunk_support"
    question_type = "choice"
    per_chunk = True

    def check(self, defn: EvaluatorDef) -> None:
        need_support_options(defn)

    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_chunk_support(defn, answers, threshold)
