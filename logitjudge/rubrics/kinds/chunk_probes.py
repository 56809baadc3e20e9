"""``chunk_probes``: per chunk (and per claim of the output, with ``claim_probes``), named yes/no
probes over the chunk alone and over a content-free chunk, mapped to the options by a fitted
multinomial logistic; the item as chunk support (any contradiction fails)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from logitjudge.contract.evaluate import EvaluatorResult, Item
from logitjudge.rubrics.kinds.base import Answers, ScoringKind, check_classes, need_support_options
from logitjudge.rubrics.questions import (
    NULL_GROUP,
    Planned,
    QuestionKey,
    chunk_group,
    chunk_state,
    noul_question,
    quote_claim,
    quote_fields,
    support_claims,
)
from logitjudge.rubrics.results import clipped_logit, softmax, support_result

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["ChunkProbes", "score_chunk_probes"]

NULL_CHUNK = "N/A"
"""The content-free chunk the probes are also asked over."""


def score_chunk_probes(defn: EvaluatorDef, answers: Answers, threshold: float, n_chunks: int) -> EvaluatorResult:
    """Per chunk: the definition's ``probes`` (yes/no questions over the chunk alone, e.g. "shows
    the claim true", "shows it false", "is consistent with it"), each also asked over the
    content-free chunk; features ``<probe>`` = logit P(yes) and ``<probe>_rel`` = that minus the
    null chunk's (Zhao et al. 2021, "Calibrate Before Use"); the chunk's distribution over the
    options is the softmax of the ``classes``' fitted linear scores (multinomial logistic
    regression), its label the most probable option. With ``claim_probes`` the probes are asked
    per claim of the output, and a chunk's distribution is that of the claim it speaks to most
    (the lowest P(unrelated)); ``x_features["claim"]`` is that claim's index.

    Item: :func:`~logitjudge.rubrics.results.support_result` (score = max(0, (S - C) / N) over
    the chunk labels [docs]; a contradicting chunk fails).
    """
    name = defn.name
    probes = list(defn.probes or {})
    classes = defn.classes or {}
    names = [o.name for o in defn.options or ()]
    asked = sorted({k.claim for k in answers if k.null and k.claim is not None})
    claims: list[int | None] = [*asked] or [None]

    def judged(i: int | None, claim: int | None) -> tuple[dict[str, float], dict[str, float]]:
        """(features, P(option)) of chunk ``i`` about ``claim`` (None: the output)."""
        feats: dict[str, float] = {}
        for p in probes:
            feats[p] = clipped_logit(answers[QuestionKey(name, chunk=i, claim=claim, part=p)].p_yes())
            null = answers[QuestionKey(name, null=True, claim=claim, part=p)]
            feats[f"{p}_rel"] = feats[p] - clipped_logit(null.p_yes())
        z = [classes[k].intercept + sum(w * feats[f] for f, w in classes[k].weights.items()) for k in names]
        if claim is not None:
            feats["claim"] = float(claims.index(claim))
        return feats, dict(zip(names, softmax(z)))

    return support_result(defn, [[judged(i, c) for c in claims] for i in range(n_chunks)], threshold)


class ChunkProbes(ScoringKind):
    """Over each chunk alone (key ``chunk=i``) and the content-free chunk (``null``): each of
    the ``probes`` (``part`` = its name), per claim with ``claim_probes`` (``claim=j``):
    :func:`score_chunk_probes`. ``question_type`` (choice) is the result's shape."""

    name = "chunk_probes"
    question_type = "choice"
    per_chunk = True
    fields: ClassVar[Mapping[str, bool]] = {"chunk_state": True, "probes": True, "classes": True, "claim_probes": False}
    needs_template = False

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        return frozenset({"claim"}) if defn.claim_probes else frozenset()

    def texts(self, defn: EvaluatorDef) -> list[str]:
        return list((defn.probes or {}).values())

    def check(self, defn: EvaluatorDef) -> None:
        need_support_options(defn)
        if defn.claim_probes and not all("{claim}" in t for t in (defn.probes or {}).values()):
            raise ValueError(f"{defn.name}: claim_probes is for chunk_probes scoring, each probe quoting {{claim}}")
        check_classes(defn, {f"{p}{suffix}" for p in defn.probes or {} for suffix in ("", "_rel")})

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        units: list[tuple[str, str, int | None]] = [
            (chunk_group(i), chunk_state(c), i) for i, c in enumerate(item.chunks())
        ]
        units.append((NULL_GROUP, chunk_state(NULL_CHUNK), None))
        planned = Planned()
        for group, passage, i in units:
            for probe, template in (defn.probes or {}).items():
                if not defn.claim_probes:
                    key = QuestionKey(defn.name, chunk=i, null=i is None, part=probe)
                    planned.add(group, passage, key, noul_question(quote_fields(template, item)))
                    continue
                for j, claim in enumerate(support_claims(item)):
                    key = QuestionKey(defn.name, chunk=i, null=i is None, claim=j, part=probe)
                    planned.add(group, passage, key, noul_question(quote_fields(quote_claim(template, claim), item)))
        return planned

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
        return score_chunk_probes(defn, answers, threshold, len(item.chunks()))
