"""The scoring kinds: one module each, registered by the name the catalogue's ``scoring`` uses.

A definition's ``"scoring": "chunk_evidence"`` selects ``KINDS["chunk_evidence"]``
(:func:`kind_of`): that kind checks the definition when it loads, builds the item's questions
under typed keys and scores their answers (:class:`~logitjudge.rubrics.kinds.base.ScoringKind`).

====================  =====================================================================
kind                  module
====================  =====================================================================
``probability``       :mod:`~logitjudge.rubrics.kinds.probability`
``rubric``            :mod:`~logitjudge.rubrics.kinds.rubric`
``chunk_precision``   :mod:`~logitjudge.rubrics.kinds.chunk_precision`
``chunk_support``     :mod:`~logitjudge.rubrics.kinds.chunk_support`
``claim_share``       :mod:`~logitjudge.rubrics.kinds.claim_share`
``typed_question``    :mod:`~logitjudge.rubrics.kinds.typed_question`
``chunk_evidence``    :mod:`~logitjudge.rubrics.kinds.chunk_evidence`
``chunk_probes``      :mod:`~logitjudge.rubrics.kinds.chunk_probes`
``entity_recall``     :mod:`~logitjudge.rubrics.kinds.entity_recall`
``answer_probes``     :mod:`~logitjudge.rubrics.kinds.answer_probes`
``chunk_head``        :mod:`~logitjudge.rubrics.kinds.chunk_head`
====================  =====================================================================

Adding a kind: a module here with its :class:`~logitjudge.rubrics.kinds.base.ScoringKind`
subclass, one entry in :data:`KINDS`, and its tests (CONTRIBUTING.md, "Add a scoring kind").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from logitjudge.rubrics.kinds.answer_probes import AnswerProbes
from logitjudge.rubrics.kinds.base import ScoringKind
from logitjudge.rubrics.kinds.chunk_evidence import ChunkEvidence
from logitjudge.rubrics.kinds.chunk_head import ChunkHead
from logitjudge.rubrics.kinds.chunk_precision import ChunkPrecision
from logitjudge.rubrics.kinds.chunk_probes import ChunkProbes
from logitjudge.rubrics.kinds.chunk_support import ChunkSupport
from logitjudge.rubrics.kinds.claim_share import ClaimShare
from logitjudge.rubrics.kinds.entity_recall import EntityRecall
from logitjudge.rubrics.kinds.probability import Probability
from logitjudge.rubrics.kinds.rubric import Rubric
from logitjudge.rubrics.kinds.typed_question import TypedQuestion

if TYPE_CHECKING:
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["KINDS", "KIND_FIELDS", "ScoringKind", "kind_of"]

KINDS: Mapping[str, ScoringKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            Probability(),
            Rubric(),
            ChunkPrecision(),
            ChunkSupport(),
            ClaimShare(),
            TypedQuestion(),
            ChunkEvidence(),
            ChunkProbes(),
            EntityRecall(),
            AnswerProbes(),
            ChunkHead(),
        )
    }
)
"""Every scoring kind, by the name a definition's ``scoring`` gives."""

KIND_FIELDS: frozenset[str] = frozenset(f for kind in KINDS.values() for f in kind.fields)
"""The definition fields only some kinds take (each kind's :attr:`~ScoringKind.fields`)."""


def kind_of(defn: EvaluatorDef) -> ScoringKind:
    """The scoring kind of ``defn`` (its ``scoring``; a loaded definition always names one)."""
    return KINDS[defn.scoring]
