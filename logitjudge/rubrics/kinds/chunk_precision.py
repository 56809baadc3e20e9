"""``chunk_precision``: one yes/no question per chunk; score = the share of relevant chunks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.rubrics.kinds.base import SequenceKind
from logitjudge.rubrics.questions import (
    Planned,
    QuestionKey,
    chunk_group,
    chunk_state,
    noul_question,
    quote_fields,
)
from logitjudge.rubrics.results import Answered, base_fields, yes_no, yes_no_detail

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ChunkPrecision", "score_chunk_precision"]


def score_chunk_precision(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """One noul per chunk: chunk i relevant when p_i >= 0.5; score = relevant / N (hard count).

    ``x_soft_score`` = mean p_i, for ranking without ties (the soft precision of spec C.13).
    """
    details = [yes_no_detail(i, answer.p_yes()) for i, answer in enumerate(answers)]
    n = len(details)
    relevant = sum(d.passed for d in details)
    score = relevant / n
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=score,
        label=f"{relevant}/{n} relevant",
        confidence=sum(d.confidence for d in details) / n,
        probabilities=yes_no(score),
        passed=score >= threshold,
        details=details,
        x_soft_score=sum(d.score for d in details) / n,
    )


class ChunkPrecision(SequenceKind):
    """A noul per chunk, over the whole item (`` `context[i]` `` names the chunk) or, with
    ``chunk_state``, over each chunk alone (``{input}`` etc. quoting fields):
    :func:`score_chunk_precision`."""

    name = "chunk_precision"
    question_type = "noul"
    per_chunk = True
    fields: ClassVar[Mapping[str, bool]] = {"chunk_state": False}

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        if not defn.chunk_state:
            return super().questions(defn, item, field=field)
        crit = defn.criteria
        text = quote_fields(defn.template or "", item)
        planned = Planned()
        for i, chunk in enumerate(item.chunks()):
            question = noul_question(text, crit.true if crit else None, crit.false if crit else None)
            planned.add(chunk_group(i), chunk_state(chunk), QuestionKey(defn.name, chunk=i), question)
        return planned

    def score_sequence(
        self,
        defn: EvaluatorDef,
        answers: Sequence[Answered],
        threshold: float,
        baseline: Sequence[Answered] | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_chunk_precision(defn, answers, threshold)
