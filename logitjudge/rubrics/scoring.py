"""Answers -> evaluator results: the one dispatch to an evaluator's scoring kind (spec B.3, B.4, B.6).

:func:`score_evaluator` scores an evaluator's answers on one item, by the keys its kind asked
them under, through the kind its definition's ``scoring`` names
(:data:`logitjudge.rubrics.kinds.KINDS`; each kind's module documents its score, label and pass
rule). :func:`score_answers` is the same for a kind that asks over the whole item, given its
answers in question order. The result fields every kind shares (labels, yes/no and rubric
fields, per-chunk rows) are built by :mod:`logitjudge.rubrics.results`; those, and the pure
scoring functions of the kinds that other modules name, are re-exported here.

============== ============================ ====================== ==========================
scoring        score                        label                  passed
============== ============================ ====================== ==========================
probability    p(yes)                       "nn% yes"              p >= threshold
 + contrast    sigmoid(logit p - logit p0)  "nn% yes"              score >= threshold
rubric         E[level] / (L-1)             "x.x / L-1"            score >= threshold
 + scaling     Platt of the score           as above               as above
chunk_precision relevant / N (p_i >= 0.5)   "k/N relevant"         score >= threshold
chunk_support  max(0, (S - C) / N)          "S supports, C ..."    no contradiction, score >= threshold
claim_share    mean p_i over N claims       "k/N claims supported" score >= threshold
 + contrast    mean of the contrasts        as above               as above
typed_question noul p; score E/(L-1);       as the answer          null (no pass rule)
               choice null
============== ============================ ====================== ==========================

(the kinds that ask over each chunk or the output alone, ``chunk_evidence``, ``chunk_probes``,
``chunk_head``, ``entity_recall`` and ``answer_probes``, are in their modules.)

Confidence: yes/no ``|p - 0.5| * 2`` [docs]; choice and score: the System One answer's own
confidence (spec A.7); per-chunk evaluators: the mean of the chunk confidences (spec B.6).
The "x.x / 3" label is floored to one decimal, which reproduces the context_entity_recall
page's example (levels 2 and 3 at 5% / 95%, expected level 2.95, shown as "2.9 / 3").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.rubrics.kinds import KINDS, kind_of
from logitjudge.rubrics.kinds.answer_probes import answer_features
from logitjudge.rubrics.kinds.base import Answers, ScoringKind, SequenceKind
from logitjudge.rubrics.kinds.chunk_evidence import chunk_features
from logitjudge.rubrics.kinds.probability import score_probability
from logitjudge.rubrics.kinds.rubric import score_rubric
from logitjudge.rubrics.kinds.typed_question import score_typed_question
from logitjudge.rubrics.results import (
    Answered,
    clipped_logit,
    contrast_probability,
    count_distribution,
    errored,
    level_label,
    level_of_share,
    percent_label,
    rubric_score,
    share_levels,
    skipped,
)

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = [
    "Answered",
    "SCALED_SCORINGS",
    "score_evaluator",
    "score_answers",
    "score_probability",
    "score_rubric",
    "score_typed_question",
    "chunk_features",
    "answer_features",
    "clipped_logit",
    "contrast_probability",
    "count_distribution",
    "level_label",
    "level_of_share",
    "percent_label",
    "rubric_score",
    "share_levels",
    "skipped",
    "errored",
]

SCALED_SCORINGS = tuple(name for name, kind in KINDS.items() if kind.scaled)
"""The scorings whose score an evaluator scaling of the calibration applies to (one 0..1 score per item)."""


def _checked(defn: EvaluatorDef, has_baseline: bool, scaling: Scaling | None) -> ScoringKind:
    kind = kind_of(defn)
    if (defn.contrast is not None) != has_baseline:
        raise ValueError(f"{defn.name}: contrast {defn.contrast!r} and baseline answers must come together")
    if scaling is not None and not kind.scaled:
        raise ValueError(
            f"{defn.name}: a score scaling applies to {' and '.join(SCALED_SCORINGS)} scoring, not {defn.scoring!r}"
        )
    return kind


def score_evaluator(
    defn: EvaluatorDef,
    answers: Answers,
    threshold: float | None,
    item: Item,
    baseline: Answers | None = None,
    scaling: Scaling | None = None,
) -> EvaluatorResult:
    """``defn``'s result on ``item`` from its answers by key (those its kind's
    :meth:`~logitjudge.rubrics.kinds.base.ScoringKind.questions` asked); ``threshold`` defaults
    to the definition's.

    ``baseline``: the answers over the state without ``context``, required exactly when the
    evaluator has ``contrast``; ``scaling``: the calibration's scaling of the score, only for
    kinds it applies to (:data:`SCALED_SCORINGS`).

    Raises:
        ValueError: a missing or unexpected ``baseline`` or ``scaling``; an answer unlike its question.
        KeyError: an answer the scoring needs is missing.
    """
    kind = _checked(defn, baseline is not None, scaling)
    limit = defn.threshold if threshold is None else threshold
    return kind.score(defn, answers, limit, item, baseline=baseline, scaling=scaling)


def score_answers(
    defn: EvaluatorDef,
    answers: Sequence[Answered],
    threshold: float | None = None,
    baseline: Sequence[Answered] | None = None,
    scaling: Scaling | None = None,
) -> EvaluatorResult:
    """:func:`score_evaluator` for a kind that asks over the whole item
    (:class:`~logitjudge.rubrics.kinds.base.SequenceKind`: ``probability``, ``rubric``,
    ``chunk_precision``, ``chunk_support``, ``claim_share``, ``typed_question``), its answers in
    question order (chunk or claim order).

    Raises:
        ValueError: as :func:`score_evaluator`, or a kind that needs the item's keys.
    """
    kind = _checked(defn, baseline is not None, scaling)
    if not isinstance(kind, SequenceKind):
        raise ValueError(f"{defn.name}: {defn.scoring} scoring reads its answers by key (score_evaluator)")
    limit = defn.threshold if threshold is None else threshold
    return kind.score_sequence(defn, answers, limit, baseline, scaling)
