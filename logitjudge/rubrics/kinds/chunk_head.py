"""``chunk_head``: per chunk and claim of the output, the template's choice over the chunk alone,
read by a trained head; a chunk is judged by the claim it speaks to most; the item as chunk
support (any contradiction fails)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.engine.types import render_text
from logitjudge.rubrics.kinds.base import Answers, HeadExample, ScoringKind, need_support_options
from logitjudge.rubrics.questions import (
    Planned,
    QuestionKey,
    chunk_group,
    chunk_state,
    head_question,
    support_claims,
)
from logitjudge.rubrics.results import support_result

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ChunkHead", "score_chunk_head"]


def score_chunk_head(defn: EvaluatorDef, answers: Answers, threshold: float, n_chunks: int) -> EvaluatorResult:
    """Per chunk and claim: the trained head's distribution over the options (the question
    keyed ``chunk=i, claim=j``); each chunk is judged by the claim it speaks to most (the lowest
    P(unrelated)); then the item as :func:`~logitjudge.rubrics.results.support_result`.
    ``x_features`` of a detail: the claim's index and, when a head read the question, the label
    readout's P(option) (``zero_shot_<option>``), for comparison (an adapter's answer has no
    label readout beside it)."""
    names = [o.name for o in defn.options or ()]
    n_claims = len({k.claim for k in answers if k.chunk == 0 and k.claim is not None})
    per_chunk = []
    for i in range(n_chunks):
        judged = []
        for j in range(n_claims):
            a = answers[QuestionKey(defn.name, chunk=i, claim=j)]
            feats = {"claim": float(j)}
            if a.question.adapter is None:  # a head's answer keeps the label readout beside it
                zero = a.answer.label_probabilities or a.answer.probabilities
                feats |= {f"zero_shot_{n}": float(p) for n, p in zip(names, zero)}
            judged.append((feats, dict(zip(names, a.answer.probabilities))))
        per_chunk.append(judged)
    return support_result(defn, per_chunk, threshold)


class ChunkHead(ScoringKind):
    """Over each chunk alone, per claim of the output (:func:`~logitjudge.rubrics.questions.support_claims`):
    :func:`~logitjudge.rubrics.questions.head_question` (key ``chunk=i, claim=j``), read by the
    trained ``head``: :func:`score_chunk_head`. Without the head the runner asks ``head.fallback``."""

    name = "chunk_head"
    head_gold = "gold.per_chunk (or gold.label for a one-chunk row)"
    question_type = "choice"
    per_chunk = True
    fields: ClassVar[Mapping[str, bool]] = {"chunk_state": True, "head": True}

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        return frozenset({"claim"})

    def check(self, defn: EvaluatorDef) -> None:
        if "{claim}" not in (defn.template or ""):
            raise ValueError(f"{defn.name}: chunk_head asks over each chunk alone (chunk_state), quoting {{claim}}")
        need_support_options(defn)

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        claims = support_claims(item)
        planned = Planned()
        for i, c in enumerate(item.chunks()):
            for j, claim in enumerate(claims):
                planned.add(
                    chunk_group(i),
                    chunk_state(c),
                    QuestionKey(defn.name, chunk=i, claim=j),
                    head_question(defn, claim, item),
                )
        return planned

    def head_examples(self, defn: EvaluatorDef, item: Item, gold: Mapping[str, Any]) -> list[HeadExample] | None:
        """Per chunk with a gold label (``gold.per_chunk[i]``, or ``gold.label`` for a one-chunk
        row): the chunk's state and the question about the whole output as its claim."""
        chunks = item.chunks()
        labels = gold.get("per_chunk")
        if not labels and "label" in gold and len(chunks) == 1:
            labels = [gold["label"]]
        if not labels or len(labels) != len(chunks):
            return []
        names = [o.name for o in defn.options or ()]
        question = replace(head_question(defn, render_text(item.output), item), head=None)
        out = []
        for i, (chunk, label) in enumerate(zip(chunks, labels)):
            if label not in names:
                raise ValueError(f"gold label {label!r} is not one of {names}")
            out.append(HeadExample(f"#{i}", chunk_state(chunk), question, str(label)))
        return out

    def score(
        self,
        defn: EvaluatorDef,
        answers: Answers,
        threshold: float,
        item: Item,
        *,
        baseline: Answers | None = None,
        scaling: Scaling | None = None,
    ) -> EvaluatorResult:
        return score_chunk_head(defn, answers, threshold, len(item.chunks()))
