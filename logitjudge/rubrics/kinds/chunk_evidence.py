"""``chunk_evidence``: per chunk, over the chunk alone, a yes/no question and the likelihood of a
field's text, each against a content-free chunk, combined by a fitted logistic into P(relevant);
score = the share of relevant chunks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.engine.answers import decisiveness
from logitjudge.engine.types import Option, Question, render_text
from logitjudge.rubrics.kinds.base import Answers, HeadExample, ScoringKind
from logitjudge.rubrics.questions import (
    LIKELIHOOD,
    NULL_GROUP,
    Planned,
    QuestionKey,
    chunk_group,
    chunk_state,
    noul_question,
    quote_fields,
)
from logitjudge.rubrics.results import (
    Answered,
    base_fields,
    clipped_logit,
    percent_label,
    sigmoid,
    yes_no,
    yes_no_detail,
)

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ChunkEvidence", "chunk_features", "score_chunk_evidence"]


def chunk_features(noul: Answered, lik: Answered, null_noul: Answered, null_lik: Answered) -> dict[str, float]:
    """The per-chunk features of ``chunk_evidence`` scoring.

    - ``pmi``: ``(log P(text | chunk) - log P(text | null chunk)) / tokens``, nats per token:
      how much the chunk raises the likelihood of the scored text (the question, for chunk
      relevance): pointwise mutual information, the question-likelihood reranking of Sachan et
      al. 2022 ("Improving Passage Retrieval with Zero-Shot Question Generation", UPR) with the
      content-free baseline of Holtzman et al. 2021 ("Surface Form Competition");
    - ``pmi_sum``: the same, summed over the tokens (nats);
    - ``yes``: logit P(yes) of the chunk's noul;
    - ``yes_rel``: ``yes`` minus the null chunk's (Zhao et al. 2021, "Calibrate Before Use").
    """
    assert lik.answer.log_likelihood is not None and null_lik.answer.log_likelihood is not None
    gain = lik.answer.log_likelihood - null_lik.answer.log_likelihood
    yes = clipped_logit(noul.p_yes())
    return {
        "pmi": gain / max(1, lik.answer.tokens or 1),
        "pmi_sum": gain,
        "yes": yes,
        "yes_rel": yes - clipped_logit(null_noul.p_yes()),
    }


def _combined(combine: Any, features: Mapping[str, float]) -> float:
    """``sigmoid(intercept + sum_f w_f x_f)`` of a :class:`~logitjudge.rubrics.definitions.CombineDef`."""
    return sigmoid(combine.intercept + sum(w * features[f] for f, w in combine.weights.items()))


def score_chunk_evidence(defn: EvaluatorDef, answers: Answers, threshold: float, n_chunks: int) -> EvaluatorResult:
    """Per chunk: P(relevant) = the definition's fitted ``combine`` of :func:`chunk_features`
    and of the same features centred on the item's mean over its chunks (``<feature>_c``: the
    batch calibration of Zhou et al. 2024, "Batch Calibration", ICLR, over one item's chunks,
    which removes what the item's question alone does to every chunk's answer); chunk i is
    relevant when P >= 0.5. A single chunk has centred features 0, so its absolute features decide.
    Score = relevant / N (precision, as RAGAS
    context_precision without ranks); ``label`` "nn% yes" of the score, ``probabilities``
    yes/no of the score, ``confidence`` ``|score - 0.5| * 2`` (the page's result shape);
    ``x_soft_score`` = mean P(relevant); details per chunk with ``x_features``."""
    name = defn.name
    null_noul = answers[QuestionKey(name, null=True)]
    null_lik = answers[QuestionKey(name, null=True, part=LIKELIHOOD)]
    feats = [
        chunk_features(
            answers[QuestionKey(name, chunk=i)],
            answers[QuestionKey(name, chunk=i, part=LIKELIHOOD)],
            null_noul,
            null_lik,
        )
        for i in range(n_chunks)
    ]
    for key in ("pmi", "pmi_sum", "yes", "yes_rel"):  # batch calibration over the item's chunks
        mean = sum(f[key] for f in feats) / n_chunks
        for f in feats:
            f[f"{key}_c"] = f[key] - mean
    soft = [_combined(defn.combine, f) for f in feats]
    details = [yes_no_detail(i, p).model_copy(update={"x_features": f}) for i, (p, f) in enumerate(zip(soft, feats))]
    relevant = sum(d.passed for d in details)
    score = relevant / n_chunks
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=score,
        label=percent_label(score),
        confidence=decisiveness(score),
        probabilities=yes_no(score),
        passed=score >= threshold,
        details=details,
        x_soft_score=sum(soft) / n_chunks,
        x_relevant=f"{relevant}/{n_chunks} relevant",
    )


class ChunkEvidence(ScoringKind):
    """Over each chunk alone and over the content-free ``likelihood.null_chunk``: the template's
    noul (key ``chunk=i`` / ``null``; read by the definition's ``head`` when it names one) and the
    ``likelihood`` continuation (``part="lik"``): :func:`score_chunk_evidence`."""

    name = "chunk_evidence"
    head_gold = "gold.per_chunk (true or false per chunk)"
    question_type = "noul"
    per_chunk = True
    fields: ClassVar[Mapping[str, bool]] = {"chunk_state": True, "likelihood": True, "combine": True, "head": False}

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        assert defn.likelihood is not None
        crit = defn.criteria
        text = quote_fields(defn.template or "", item)
        units: list[tuple[str, str, int | None]] = [
            (chunk_group(i), chunk_state(c), i) for i, c in enumerate(item.chunks())
        ]
        units.append((NULL_GROUP, chunk_state(defn.likelihood.null_chunk), None))
        scored = render_text(getattr(item, defn.likelihood.text))
        planned = Planned()
        head = defn.head.name if defn.head is not None else None
        for group, passage, i in units:
            noul = replace(noul_question(text, crit.true if crit else None, crit.false if crit else None), head=head)
            planned.add(group, passage, QuestionKey(defn.name, chunk=i, null=i is None), noul)
            lik = Question("continuation", defn.likelihood.instructions, (Option(scored),), calibrated=False)
            planned.add(group, passage, QuestionKey(defn.name, chunk=i, null=i is None, part=LIKELIHOOD), lik)
        return planned

    def head_examples(self, defn: EvaluatorDef, item: Item, gold: Mapping[str, Any]) -> list[HeadExample] | None:
        """Per chunk with a gold label (``gold.per_chunk[i]``: relevant or not, a bool): the chunk's
        state and the template's noul about the item's question."""
        labels = gold.get("per_chunk")
        chunks = item.chunks()
        if not labels or len(labels) != len(chunks):
            return []
        out = []
        for state, questions in self.questions(defn, item).groups.values():
            for key, question in questions.items():
                if question.type != "noul" or key.chunk is None:
                    continue
                label = labels[key.chunk]
                if not isinstance(label, bool):
                    raise ValueError(f"gold.per_chunk[{key.chunk}] = {label!r} is not true or false")
                out.append(
                    HeadExample(f"#{key.chunk}", state, replace(question, head=None), "true" if label else "false")
                )
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
        return score_chunk_evidence(defn, answers, threshold, len(item.chunks()))
