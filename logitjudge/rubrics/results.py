"""The result shapes every scoring kind builds: answers with their questions, labels, the
yes/no, rubric and choice fields, per-chunk rows, and the small numerics they share.

Pure functions; nothing here imports torch at import time (:func:`softmax` loads it on first
use). The kinds (:mod:`logitjudge.rubrics.kinds`) build their results from these, so a result
field means the same in every kind. The answer fields (choice, expected score, confidence) come
from :mod:`logitjudge.engine.answers` (spec A.7), exactly as ``POST /v1/systemone`` computes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logitjudge.contract.evaluate import ChunkDetail, EvaluatorResult
from logitjudge.engine import answers as answer_fields
from logitjudge.engine.answers import decisiveness, noul_distribution
from logitjudge.engine.formulas import sigmoid as _sigmoid
from logitjudge.engine.formulas import softmax as tensor_softmax
from logitjudge.engine.types import Answer, Question

if TYPE_CHECKING:
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = [
    "Answered",
    "CHUNK_SUPPORT_SCORES",
    "clip01",
    "percent_label",
    "level_label",
    "base_fields",
    "skipped",
    "errored",
    "yes_no",
    "contrast_probability",
    "rubric_score",
    "rubric_fields",
    "choice_fields",
    "yes_no_detail",
    "clipped_logit",
    "softmax",
    "sigmoid",
    "support_result",
    "located_claims",
    "level_of_share",
    "count_distribution",
    "share_levels",
]


@dataclass(frozen=True)
class Answered:
    """One engine answer with the question it answers (its option names and levels).

    Attributes:
        question: the question as sent (``options`` name the probabilities, in order).
        answer: the engine's answer: ``probabilities`` one per option, and ``option_mass``.
    """

    question: Question
    answer: Answer

    def probabilities(self) -> dict[str, float]:
        """``{option name: probability}`` in option order (score: ``"0"``..``"n-1"``)."""
        return {o.name: float(p) for o, p in zip(self.question.options, self.answer.probabilities, strict=True)}

    def p_yes(self) -> float:
        """A noul's P(true), clipped to [0, 1] (the wire answer's ``noul``)."""
        if self.question.type != "noul":
            raise ValueError(f"expected a noul answer, got a {self.question.type} answer")
        return clip01(self.answer.probabilities[0])

    def choice(self) -> str:
        """The option with the largest probability (ties: the earliest)."""
        return self.question.options[answer_fields.argmax(self.answer.probabilities)].name


CHUNK_SUPPORT_SCORES = {"supports": 1.0, "unrelated": 0.5, "contradicts": 0.0}
"""Per-chunk score of chunk_support's details, "mapped from the chosen option" [docs]."""


def clip01(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


def percent_label(p: float) -> str:
    """``0.834 -> "83% yes"`` (nearest whole percent, halves up)."""
    return f"{int(math.floor(p * 100 + 0.5))}% yes"


def level_label(expected_level: float, top: int) -> str:
    """``(2.95, 3) -> "2.9 / 3"``: the expected level floored to one decimal, over the top level."""
    floored = math.floor(expected_level * 10 + 1e-6) / 10  # 1e-6 absorbs float noise (2.2999999 -> 2.3)
    return f"{floored:.1f} / {top}"


def base_fields(defn: EvaluatorDef, threshold: float) -> dict[str, Any]:
    return {"name": defn.name, "version": defn.version, "status": "ok", "threshold": threshold}


def skipped(defn: EvaluatorDef, reason: str) -> EvaluatorResult:
    """A result for an evaluator that did not run (e.g. a required field is missing)."""
    return EvaluatorResult(name=defn.name, version=defn.version, status="skipped", reason=reason)


def errored(defn: EvaluatorDef, reason: str) -> EvaluatorResult:
    """A result for an evaluator that failed for a reason other than the caller's input."""
    return EvaluatorResult(name=defn.name, version=defn.version, status="error", reason=reason)


def yes_no(p_yes: float) -> dict[str, float]:
    """``{"yes": ..., "no": ...}``: the pair :func:`~logitjudge.engine.answers.noul_distribution` gives."""
    yes, no = noul_distribution(p_yes)
    return {"yes": yes, "no": no}


_CONTRAST_EPS = 1e-6
"""P(yes) is clipped to [eps, 1 - eps] before its logit, so a saturated answer stays finite."""


def contrast_probability(p_with: float, p_without: float) -> float:
    """How much the evidence raises P(yes): ``sigmoid(logit p_with - logit p_without)``.

    Args:
        p_with: P(yes) of the question over the whole state (with ``context``), in [0, 1].
        p_without: P(yes) of the same question over the state without ``context``, in [0, 1].

    Returns:
        A probability in (0, 1): 0.5 when the context changes nothing, above when it raises
        P(yes), below when it lowers it. It is the posterior of "yes" when the prior odds of the
        context-free question are divided out (odds ratio), the content-free calibration of Zhao
        et al. 2021 ("Calibrate Before Use", ICML) and the PMI scoring of Holtzman et al. 2021
        ("Surface Form Competition"), applied to the evidence instead of an empty input.
        It cancels what the answer alone makes the model say (its length, its fluency).
    """

    q = min(1.0 - _CONTRAST_EPS, max(_CONTRAST_EPS, float(p_with)))
    q0 = min(1.0 - _CONTRAST_EPS, max(_CONTRAST_EPS, float(p_without)))
    odds = (q * (1.0 - q0)) / ((1.0 - q) * q0)  # exp(logit q - logit q0), the odds ratio
    return odds / (1.0 + odds)


def rubric_score(levels: Sequence[float]) -> float:
    """A rubric's 0..1 score of its L level probabilities (lowest first): ``E[level] / (L-1)``,
    clipped to [0, 1]."""
    return clip01(answer_fields.expected_score(levels) / (len(levels) - 1))


def rubric_fields(answer: Answered) -> dict[str, Any]:
    if answer.question.type != "score":
        raise ValueError(f"expected a score answer, got a {answer.question.type} answer")
    probs = answer.probabilities()
    top = len(probs) - 1
    expected = answer_fields.expected_score(answer.answer.probabilities)
    return {
        "score": rubric_score(answer.answer.probabilities),
        "label": level_label(expected, top),
        "confidence": clip01(answer_fields.score_confidence(answer.answer.probabilities)),
        "probabilities": probs,
        "legend": {o.name: o.description for o in answer.question.options},
    }


def choice_fields(answer: Answered) -> dict[str, Any]:
    if answer.question.type != "choice":
        raise ValueError(f"expected a choice answer, got a {answer.question.type} answer")
    return {
        "label": answer.choice(),
        "confidence": clip01(answer_fields.choice_confidence(answer.answer.probabilities)),
        "probabilities": answer.probabilities(),
    }


def yes_no_detail(index: int, p: float, probability: float | None = None) -> ChunkDetail:
    """One chunk's or claim's row: score ``p``, passed when p >= 0.5; ``probability`` defaults
    to ``p`` (a contrast row gives its P(yes) with the context there)."""
    return ChunkDetail(
        index=index,
        label=percent_label(p),
        score=p,
        probability=p if probability is None else probability,
        confidence=decisiveness(p),
        passed=p >= 0.5,
    )


_LOGIT_EPS = 1e-6


def clipped_logit(p: float, eps: float = _LOGIT_EPS) -> float:
    """The log-odds of ``p``, with ``p`` clipped to ``[eps, 1 - eps]`` first (finite at 0 and 1)."""
    q = min(1.0 - eps, max(eps, float(p)))
    return math.log(q / (1.0 - q))


def softmax(values: Sequence[float]) -> list[float]:
    """fp64 softmax of ``values``: the engine's one softmax (:func:`logitjudge.engine.formulas.softmax`)."""
    import torch  # lazily: importing the rubrics (the server does) must not load torch

    return [float(x) for x in tensor_softmax(torch.tensor(list(values), dtype=torch.float64))]


sigmoid = _sigmoid
"""``1 / (1 + exp(-z))`` (:func:`logitjudge.engine.formulas.sigmoid`, plain Python)."""


def support_result(
    defn: EvaluatorDef, per_chunk: Sequence[Sequence[tuple[dict[str, float], dict[str, float]]]], threshold: float
) -> EvaluatorResult:
    """The chunk-support result from each chunk's ``(features, P(option))`` per claim: a chunk
    takes the claim with the lowest P(unrelated); score = max(0, (S - C) / N) over the chunk
    labels [docs]; a contradicting chunk fails; ``label``: "contradicts" when a chunk
    contradicts, else "supports" when one supports, else "unrelated"; ``probabilities``:
    contradicts = P(at least one chunk contradicts), supports = P(none contradicts and one
    supports), unrelated the rest (chunks independent); ``x_counts`` the label counts."""
    details = []
    n_chunks = len(per_chunk)
    for i, by_claim in enumerate(per_chunk):
        # the claim the chunk speaks to most decides (one claim: that claim)
        k = min(range(len(by_claim)), key=lambda j: by_claim[j][1].get("unrelated", 0.0))
        feats, probs = by_claim[k]
        label = max(probs, key=lambda o: probs[o])
        details.append(
            ChunkDetail(
                index=i,
                label=label,
                score=CHUNK_SUPPORT_SCORES.get(label, 0.5),
                probabilities=probs,
                confidence=clip01(answer_fields.choice_confidence(list(probs.values()))),
                passed=label != "contradicts",
                x_features=feats,
            )
        )
    counts = {o.name: sum(d.label == o.name for d in details) for o in defn.options or ()}
    score = max(0.0, (counts["supports"] - counts["contradicts"]) / n_chunks)
    none_c = math.prod(1 - (d.probabilities or {})["contradicts"] for d in details)
    none_s = math.prod(1 - (d.probabilities or {})["supports"] for d in details)
    top_probs = {"supports": none_c * (1 - none_s), "contradicts": 1 - none_c, "unrelated": none_c * none_s}
    label = "contradicts" if counts["contradicts"] else "supports" if counts["supports"] else "unrelated"
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=score,
        label=label,
        confidence=clip01(answer_fields.choice_confidence(list(top_probs.values()))),
        probabilities=top_probs,
        passed=counts["contradicts"] == 0 and score >= threshold,
        details=details,
        x_counts=counts,
    )


def located_claims(
    claims: Sequence[str], cells: Mapping[tuple[int, int], Mapping[str, float]], threshold: float = 0.5
) -> list[ChunkDetail]:
    """Located verdicts: per claim of the output, the chunk that decides it.

    ``cells[(i, j)]``: P(option) of chunk ``i`` on claim ``j`` (options ``supports``,
    ``contradicts``, ``unrelated``: chunk_support version 4's per-chunk, per-claim answers). A
    claim is "contradicted" when, on this claim, some chunk's most probable option is
    ``contradicts`` (that chunk decides: the one with the largest P(contradicts)); else
    "supported" when some chunk's is ``supports`` (the one with the largest P(supports)); else
    "not found" (``x_chunk``: the chunk closest to supporting it). A contradiction decides over a
    support. ``score`` and ``probability``: the largest P(supports) over the chunks (MiniCheck's
    aggregation over document chunks); ``probabilities``: the deciding chunk's; ``passed``:
    supported and score >= ``threshold``. (chunk_support's own result judges each chunk by the
    claim it speaks to most, so the two can differ on a chunk that speaks to several claims.)

    Returns:
        one :class:`~logitjudge.contract.evaluate.ChunkDetail` per claim (``index`` = the
        claim's, ``x_claim`` its text, ``x_chunk`` the deciding chunk); claims without cells are
        left out.
    """

    def top(p: Mapping[str, float]) -> str:
        return max(p, key=lambda o: p[o])

    out = []
    for j, claim in enumerate(claims):
        row = {i: p for (i, c), p in cells.items() if c == j}
        if not row:
            continue
        best_s = max(row, key=lambda i: row[i].get("supports", 0.0))
        against = [i for i in row if top(row[i]) == "contradicts"]
        backing = [i for i in row if top(row[i]) == "supports"]
        if against:
            chunk, verdict = max(against, key=lambda i: row[i]["contradicts"]), "contradicted"
        elif backing:
            chunk, verdict = max(backing, key=lambda i: row[i]["supports"]), "supported"
        else:
            chunk, verdict = best_s, "not found"
        p_s = float(row[best_s].get("supports", 0.0))
        probs = {o: float(v) for o, v in row[chunk].items()}
        out.append(
            ChunkDetail(
                index=j,
                label=f"{verdict} (chunk {chunk})" if verdict != "not found" else "not found in any chunk",
                score=p_s,
                probability=p_s,
                probabilities=probs,
                confidence=clip01(answer_fields.choice_confidence(list(probs.values()))),
                passed=verdict == "supported" and p_s >= threshold,
                x_claim=claim,
                x_chunk=chunk,
            )
        )
    return out


def level_of_share(present: int, total: int, top: int = 3) -> int:
    """The page's level of ``present`` of ``total`` entities: 0 none, ``top`` all; between,
    levels 1..top-1 by the share (``top = 3``: under half "a few" (1), half or more "most" (2))."""
    if present <= 0:
        return 0
    if present >= total:
        return top
    return 1 + min(top - 2, int((present / total) * (top - 1)))


def count_distribution(ps: Sequence[float]) -> list[float]:
    """P(exactly k of independent events happen), k = 0..n, for event probabilities ``ps``
    (the Poisson-binomial distribution, by the usual O(n^2) recursion)."""
    dist = [1.0]
    for prob in ps:
        dist = [
            (dist[k] if k < len(dist) else 0.0) * (1 - prob) + (dist[k - 1] * prob if k else 0.0)
            for k in range(len(dist) + 1)
        ]
    return dist


def share_levels(ps: Sequence[float], top: int) -> list[float]:
    """P(level) for level 0..top when each of N units holds with probability ``ps[i]``
    (independently): the count's Poisson-binomial distribution (:func:`count_distribution`),
    each count k mapped to :func:`level_of_share` (k, N)."""
    levels = [0.0] * (top + 1)
    for k, pk in enumerate(count_distribution(ps)):
        levels[level_of_share(k, len(ps), top)] += pk
    return levels
