"""Answers -> evaluator results: pure functions, one per ``scoring`` kind (spec B.3, B.4, B.6).

Every function takes the evaluator's definition, its typed answers (:class:`Answered`: each
engine :class:`~logitjudge.engine.types.Answer` with the :class:`~logitjudge.engine.types.Question`
it answers, in the order of its question ids) and the threshold, and returns an
:class:`EvaluatorResult`. The answer fields (choice, expected score, confidence) come from
:mod:`logitjudge.engine.answers` (spec A.7), exactly as ``POST /v1/systemone`` computes them.

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

Confidence: yes/no ``|p - 0.5| * 2`` [docs]; choice and score: the System One answer's own
confidence (spec A.7); per-chunk evaluators: the mean of the chunk confidences (spec B.6).
The "x.x / 3" label is floored to one decimal, which reproduces the context_entity_recall
page's example (levels 2 and 3 at 5% / 95%, expected level 2.95, shown as "2.9 / 3").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logitjudge.contract.evaluate import ChunkDetail, EvaluatorResult, Item
from logitjudge.convert import answer_to_wire
from logitjudge.engine import answers as answer_fields
from logitjudge.engine.answers import decisiveness, noul_distribution
from logitjudge.engine.types import Answer, Question
from logitjudge.rubrics.definitions import EvaluatorDef
from logitjudge.rubrics.entities import EntityCheck

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling

__all__ = [
    "Answered",
    "clipped_logit",
    "percent_label",
    "level_label",
    "score_answers",
    "SCALED_SCORINGS",
    "score_probability",
    "contrast_probability",
    "score_rubric",
    "rubric_score",
    "score_chunk_precision",
    "score_chunk_support",
    "score_claim_share",
    "score_typed_question",
    "skipped",
    "errored",
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
        return _clip01(self.answer.probabilities[0])

    def choice(self) -> str:
        """The option with the largest probability (ties: the earliest)."""
        return self.question.options[answer_fields.argmax(self.answer.probabilities)].name


CHUNK_SUPPORT_SCORES = {"supports": 1.0, "unrelated": 0.5, "contradicts": 0.0}
"""Per-chunk score of chunk_support's details, "mapped from the chosen option" [docs]."""


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


def percent_label(p: float) -> str:
    """``0.834 -> "83% yes"`` (nearest whole percent, halves up)."""
    return f"{int(math.floor(p * 100 + 0.5))}% yes"


def level_label(expected_level: float, top: int) -> str:
    """``(2.95, 3) -> "2.9 / 3"``: the expected level floored to one decimal, over the top level."""
    floored = math.floor(expected_level * 10 + 1e-6) / 10  # 1e-6 absorbs float noise (2.2999999 -> 2.3)
    return f"{floored:.1f} / {top}"


def _base(defn: EvaluatorDef, threshold: float) -> dict[str, Any]:
    return {"name": defn.name, "version": defn.version, "status": "ok", "threshold": threshold}


def skipped(defn: EvaluatorDef, reason: str) -> EvaluatorResult:
    """A result for an evaluator that did not run (e.g. a required field is missing)."""
    return EvaluatorResult(name=defn.name, version=defn.version, status="skipped", reason=reason)


def errored(defn: EvaluatorDef, reason: str) -> EvaluatorResult:
    """A result for an evaluator that failed for a reason other than the caller's input."""
    return EvaluatorResult(name=defn.name, version=defn.version, status="error", reason=reason)


def _yes_no(p_yes: float) -> dict[str, float]:
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


def score_probability(
    defn: EvaluatorDef,
    answers: Sequence[Answered],
    threshold: float,
    baseline: Sequence[Answered] | None = None,
    scaling: Scaling | None = None,
) -> EvaluatorResult:
    """One noul: score = p(yes); passed when score >= threshold.

    With ``baseline`` (the same question over the state without ``context``, for an evaluator
    with ``contrast: "context"``), score = :func:`contrast_probability` of the two, and both
    P(yes) are reported (``x_p_yes_with_context``, ``x_p_yes_without_context``).
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
        **_base(defn, threshold),
        score=p,
        label=percent_label(p),
        confidence=decisiveness(p),
        probabilities=_yes_no(p),
        passed=p >= threshold,
        x_p_yes_with_context=None if p_without is None else p_with,
        x_p_yes_without_context=p_without,
        x_score_uncalibrated=uncalibrated,
    )


def rubric_score(levels: Sequence[float]) -> float:
    """A rubric's 0..1 score of its L level probabilities (lowest first): ``E[level] / (L-1)``,
    clipped to [0, 1]."""
    return _clip01(answer_fields.expected_score(levels) / (len(levels) - 1))


def _rubric_fields(answer: Answered) -> dict[str, Any]:
    if answer.question.type != "score":
        raise ValueError(f"expected a score answer, got a {answer.question.type} answer")
    probs = answer.probabilities()
    top = len(probs) - 1
    expected = answer_fields.expected_score(answer.answer.probabilities)
    return {
        "score": rubric_score(answer.answer.probabilities),
        "label": level_label(expected, top),
        "confidence": _clip01(answer_fields.score_confidence(answer.answer.probabilities)),
        "probabilities": probs,
        "legend": {o.name: o.description for o in answer.question.options},
    }


def _choice_fields(answer: Answered) -> dict[str, Any]:
    if answer.question.type != "choice":
        raise ValueError(f"expected a choice answer, got a {answer.question.type} answer")
    return {
        "label": answer.choice(),
        "confidence": _clip01(answer_fields.choice_confidence(answer.answer.probabilities)),
        "probabilities": answer.probabilities(),
    }


def score_rubric(
    defn: EvaluatorDef, answers: Sequence[Answered], threshold: float, scaling: Scaling | None = None
) -> EvaluatorResult:
    """One score question with L levels: score = E[level]/(L-1); passed when score >= threshold.

    With ``scaling`` (the calibration's scaling of this evaluator's score, Platt scaling: see
    :mod:`logitjudge.engine.calibration`), score = ``scaling.apply(noul_distribution(s))[0]``, the
    probability that the item passes; ``x_score_uncalibrated`` = E[level]/(L-1). The label (the
    expected level), ``probabilities`` (per level) and ``confidence`` stay the score answer's.
    """
    (answer,) = answers
    fields = _rubric_fields(answer)
    uncalibrated = None
    if scaling is not None:
        uncalibrated = fields["score"]
        fields["score"] = _clip01(scaling.apply(noul_distribution(uncalibrated))[0])
    return EvaluatorResult(
        **_base(defn, threshold), **fields, passed=fields["score"] >= threshold, x_score_uncalibrated=uncalibrated
    )


def _yes_no_detail(index: int, p: float, probability: float | None = None) -> ChunkDetail:
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


def score_chunk_precision(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """One noul per chunk: chunk i relevant when p_i >= 0.5; score = relevant / N (hard count).

    ``x_soft_score`` = mean p_i, for ranking without ties (the soft precision of spec C.13).
    """
    details = [_yes_no_detail(i, answer.p_yes()) for i, answer in enumerate(answers)]
    n = len(details)
    relevant = sum(d.passed for d in details)
    score = relevant / n
    return EvaluatorResult(
        **_base(defn, threshold),
        score=score,
        label=f"{relevant}/{n} relevant",
        confidence=sum(d.confidence for d in details) / n,
        probabilities=_yes_no(score),
        passed=score >= threshold,
        details=details,
        x_soft_score=sum(d.score for d in details) / n,
    )


def score_chunk_support(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """One choice per chunk (supports / contradicts / unrelated); score = max(0, (S - C) / N).

    A single contradicting chunk fails the check [docs]; otherwise passed when score >= threshold
    (default 0, so any result without a contradiction passes). ``probabilities`` is the share of
    chunks per option.
    """
    names = [o.name for o in defn.options or ()]
    details = []
    for i, answer in enumerate(answers):
        fields = _choice_fields(answer)
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
        **_base(defn, threshold),
        score=score,
        label=", ".join(f"{counts[name]} {name}" for name in names),
        confidence=sum(d.confidence for d in details) / n,
        probabilities={name: counts[name] / n for name in names},
        passed=counts["contradicts"] == 0 and score >= threshold,
        details=details,
    )


def score_claim_share(
    defn: EvaluatorDef, answers: Sequence[Answered], threshold: float, baseline: Sequence[Answered] | None = None
) -> EvaluatorResult:
    """One noul per claim of the output: score = the mean P(supported) of the N claims.

    The expected share of supported claims (RAGAS faithfulness, Es et al. 2024, "RAGAS:
    Automated Evaluation of Retrieval Augmented Generation", with the model's P(yes) in place
    of a generated verdict per statement); a claim counts as supported in the label when
    p_i >= 0.5. With ``baseline`` (``contrast: "context"``), p_i is the
    :func:`contrast_probability` of claim i with and without the context, and
    ``x_p_yes_with_context`` / ``x_p_yes_without_context`` are the mean P(yes) of the claims
    over each state. ``details``: one per claim, in sentence order (``index`` = the claim's;
    ``score`` = p_i, ``probability`` = its P(yes) with the context); ``x_min_score`` = the
    weakest claim's p_i (a detector of the one unsupported claim).
    """
    with_context = [a.p_yes() for a in answers]
    ps, without = with_context, None
    if baseline is not None:
        without = [b.p_yes() for b in baseline]
        ps = [contrast_probability(p, p0) for p, p0 in zip(with_context, without, strict=True)]
    details = [_yes_no_detail(i, p, q) for i, (p, q) in enumerate(zip(ps, with_context, strict=True))]
    n = len(details)
    score = sum(ps) / n
    supported = sum(d.passed for d in details)
    return EvaluatorResult(
        **_base(defn, threshold),
        score=score,
        label=f"{supported}/{n} claims supported",
        confidence=sum(d.confidence for d in details) / n,
        probabilities=_yes_no(score),
        passed=score >= threshold,
        details=details,
        x_min_score=min(ps),
        x_p_yes_with_context=None if without is None else sum(with_context) / n,
        x_p_yes_without_context=None if without is None else sum(without) / n,
    )


def score_typed_question(defn: EvaluatorDef, answers: Sequence[Answered], threshold: float) -> EvaluatorResult:
    """The item's own question, reported as answered; ``answer`` holds the System One answer
    (the wire answer ``POST /v1/systemone`` gives, :func:`logitjudge.convert.answer_to_wire`).

    noul: score = p(yes), label "nn% yes"; score question: score = E[level]/(L-1), label
    "x.x / L-1"; choice: label = the chosen option, score null (options are not ordered).
    ``passed`` is null: a typed question has no pass rule (compare with your gold answer).
    """
    (answer,) = answers
    wire = answer_to_wire(answer.question, answer.answer).model_dump(mode="json", exclude_none=True)
    base = {**_base(defn, threshold), "answer": wire, "passed": None}
    why = "a typed question has no pass rule; compare its answer with the gold answer"
    if answer.question.type == "noul":
        p = answer.p_yes()
        return EvaluatorResult(
            **base,
            score=p,
            label=percent_label(p),
            confidence=decisiveness(p),
            probabilities=_yes_no(p),
            reason=why,
        )
    if answer.question.type == "score":
        return EvaluatorResult(**base, **_rubric_fields(answer), reason=why)
    return EvaluatorResult(
        **base,
        score=None,
        **_choice_fields(answer),
        reason="a choice question has unordered options, so no 0..1 score and no pass rule",
    )


SCALED_SCORINGS = ("probability", "rubric")
"""The scorings whose score an evaluator scaling of the calibration applies to (one 0..1 score per item)."""

_SCORERS: dict[str, Callable[[EvaluatorDef, Sequence[Answered], float], EvaluatorResult]] = {
    "probability": score_probability,
    "rubric": score_rubric,
    "chunk_precision": score_chunk_precision,
    "chunk_support": score_chunk_support,
    "claim_share": score_claim_share,
    "typed_question": score_typed_question,
}


def score_answers(
    defn: EvaluatorDef,
    answers: Sequence[Answered],
    threshold: float | None = None,
    baseline: Sequence[Answered] | None = None,
    scaling: Scaling | None = None,
) -> EvaluatorResult:
    """Dispatch on ``defn.scoring``; ``threshold`` defaults to the definition's.

    ``baseline``: the answers over the state without ``context``; required exactly when the
    evaluator has ``contrast`` (``ValueError`` otherwise). ``scaling``: the calibration's scaling
    of this evaluator's score; only ``probability`` and ``rubric`` scoring have one
    (:data:`SCALED_SCORINGS`; ``ValueError`` otherwise).
    """
    limit = defn.threshold if threshold is None else threshold
    if (defn.contrast is not None) != (baseline is not None):
        raise ValueError(f"{defn.name}: contrast {defn.contrast!r} and baseline answers must come together")
    if scaling is not None and defn.scoring not in SCALED_SCORINGS:
        raise ValueError(
            f"{defn.name}: a score scaling applies to {' and '.join(SCALED_SCORINGS)} scoring, not {defn.scoring!r}"
        )
    if defn.scoring == "probability":
        return score_probability(defn, answers, limit, baseline, scaling)
    if defn.scoring == "rubric":
        return score_rubric(defn, answers, limit, scaling)
    if defn.scoring == "claim_share":
        return score_claim_share(defn, answers, limit, baseline)
    return _SCORERS[defn.scoring](defn, answers, limit)


# -- evaluators whose questions are asked per group (each chunk alone, a null chunk, some fields) --

GROUP_SCORINGS = ("chunk_evidence", "chunk_probes", "entity_recall", "answer_probes", "chunk_head")
"""The scorings whose answers come from several requests (:func:`score_groups`)."""

_LOGIT_EPS = 1e-6


def clipped_logit(p: float, eps: float = _LOGIT_EPS) -> float:
    """The log-odds of ``p``, with ``p`` clipped to ``[eps, 1 - eps]`` first (finite at 0 and 1)."""
    q = min(1.0 - eps, max(eps, float(p)))
    return math.log(q / (1.0 - q))


def _softmax(values: Sequence[float]) -> list[float]:
    """fp64 softmax of ``values``: the engine's one softmax (:func:`logitjudge.engine.readout.softmax`)."""
    import torch  # lazily: importing the rubrics (the server does) must not load torch

    from logitjudge.engine.readout import softmax

    return [float(x) for x in softmax(torch.tensor(list(values), dtype=torch.float64))]


def _sigmoid(z: float) -> float:
    """``1 / (1 + exp(-z))``, as the softmax of ``(z, 0)``."""
    return _softmax((z, 0.0))[0]


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
    return _sigmoid(combine.intercept + sum(w * features[f] for f, w in combine.weights.items()))


def score_chunk_evidence(
    defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float, n_chunks: int
) -> EvaluatorResult:
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
    null_noul, null_lik = answers[f"{name}.null"], answers[f"{name}.null.lik"]
    feats = [
        chunk_features(answers[f"{name}.{i}"], answers[f"{name}.{i}.lik"], null_noul, null_lik) for i in range(n_chunks)
    ]
    for key in ("pmi", "pmi_sum", "yes", "yes_rel"):  # batch calibration over the item's chunks
        mean = sum(f[key] for f in feats) / n_chunks
        for f in feats:
            f[f"{key}_c"] = f[key] - mean
    soft = [_combined(defn.combine, f) for f in feats]
    details = [_yes_no_detail(i, p).model_copy(update={"x_features": f}) for i, (p, f) in enumerate(zip(soft, feats))]
    relevant = sum(d.passed for d in details)
    score = relevant / n_chunks
    return EvaluatorResult(
        **_base(defn, threshold),
        score=score,
        label=percent_label(score),
        confidence=decisiveness(score),
        probabilities=_yes_no(score),
        passed=score >= threshold,
        details=details,
        x_soft_score=sum(soft) / n_chunks,
        x_relevant=f"{relevant}/{n_chunks} relevant",
    )


def score_chunk_probes(
    defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float, n_chunks: int
) -> EvaluatorResult:
    """Per chunk: the definition's ``probes`` (yes/no questions over the chunk alone, e.g. "shows
    the claim true", "shows it false", "is consistent with it"), each also asked over the
    content-free chunk; features ``<probe>`` = logit P(yes) and ``<probe>_rel`` = that minus the
    null chunk's (Zhao et al. 2021, "Calibrate Before Use"); the chunk's distribution over the
    options is the softmax of the ``classes``' fitted linear scores (multinomial logistic
    regression), its label the most probable option. With ``claim_probes`` the probes are asked
    per claim of the output, and a chunk's distribution is that of the claim it speaks to most
    (the lowest P(unrelated)); ``x_features["claim"]`` is that claim's index.

    Item: score = max(0, (S - C) / N) over the chunk labels [docs]; a contradicting chunk fails;
    ``label``: "contradicts" when a chunk contradicts, else "supports" when one supports, else
    "unrelated" (the option key, as the page shows); ``probabilities``: contradicts = P(at
    least one chunk contradicts), supports = P(none contradicts and one supports), unrelated
    the rest (chunks independent); ``x_counts`` the label counts.
    """
    name = defn.name
    probes = list(defn.probes or {})
    classes = defn.classes or {}
    names = [o.name for o in defn.options or ()]
    claim_of = (re.fullmatch(rf"{re.escape(name)}\.null\.c(\d+)\.[^.]+", qid) for qid in answers)
    claims: list[str | None] = [f"c{j}" for j in sorted({int(m.group(1)) for m in claim_of if m})] or [None]

    def judged(i: int | str, claim: str | None) -> tuple[dict[str, float], dict[str, float]]:
        """(features, P(option)) of chunk ``i`` (or ``"null"``) about ``claim`` (None: the output)."""
        at = "" if claim is None else f"{claim}."
        feats: dict[str, float] = {}
        for p in probes:
            feats[p] = clipped_logit(answers[f"{name}.{i}.{at}{p}"].p_yes())
            feats[f"{p}_rel"] = feats[p] - clipped_logit(answers[f"{name}.null.{at}{p}"].p_yes())
        z = [classes[k].intercept + sum(w * feats[f] for f, w in classes[k].weights.items()) for k in names]
        if claim is not None:
            feats["claim"] = float(claims.index(claim))
        return feats, dict(zip(names, _softmax(z)))

    return support_result(defn, [[judged(i, c) for c in claims] for i in range(n_chunks)], threshold)


def score_chunk_head(
    defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float, n_chunks: int
) -> EvaluatorResult:
    """Per chunk and claim: the trained head's distribution over the options (the question
    ``<name>.<i>.c<j>``); each chunk is judged by the claim it speaks to most (the lowest
    P(unrelated)); then the item as :func:`support_result`. ``x_features`` of a detail: the
    claim's index and the label readout's P(option) (``zero_shot_<option>``), for comparison."""
    names = [o.name for o in defn.options or ()]
    n_claims = len({qid.rsplit(".", 1)[1] for qid in answers if qid.startswith(f"{defn.name}.0.c")})
    per_chunk = []
    for i in range(n_chunks):
        judged = []
        for j in range(n_claims):
            a = answers[f"{defn.name}.{i}.c{j}"]
            zero = a.answer.label_probabilities or a.answer.probabilities
            feats = {"claim": float(j), **{f"zero_shot_{n}": float(p) for n, p in zip(names, zero)}}
            judged.append((feats, dict(zip(names, a.answer.probabilities))))
        per_chunk.append(judged)
    return support_result(defn, per_chunk, threshold)


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
                confidence=_clip01(answer_fields.choice_confidence(list(probs.values()))),
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
        **_base(defn, threshold),
        score=score,
        label=label,
        confidence=_clip01(answer_fields.choice_confidence(list(top_probs.values()))),
        probabilities=top_probs,
        passed=counts["contradicts"] == 0 and score >= threshold,
        details=details,
        x_counts=counts,
    )


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


def score_entity_recall(
    defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float, checks: Sequence[EntityCheck]
) -> EvaluatorResult:
    """Entities of ``expected`` and what the rules settle about each
    (:func:`logitjudge.rubrics.entities.check_entities`): one found verbatim in the context is
    present (p = 1); one holding a digit where the context states no number is absent (p = 0);
    otherwise p = P(yes) of the model's question "does the context mention it, or the same thing
    written another way?", and the entity counts as present when p >= 0.5 (the model's verdict).

    The level is that of the verdicts: k present of N maps to the page's level
    (:func:`level_of_share`); score = level / top, ``label`` "L.0 / top", passed when score >=
    threshold. ``probabilities`` per level are the uncertainty around it: the level's
    distribution if each entity were present with its p independently (Poisson-binomial,
    :func:`share_levels`), and ``confidence`` is the probability of the reported level under it.
    (The verdicts, not the expected level, carry the score: the model's P(yes) for an entity it
    cannot find sits near 0.3-0.45, and summing such near-misses over several entities made an
    absent set of entities look "a few present".) ``details``: one per entity (label
    ``"<entity>": verbatim``, ``"<entity>": no number in the context`` or its "nn% yes").
    """
    name = defn.name
    top = defn.top_level
    ps, details = [], []
    for k, check in enumerate(checks):
        if check.status == "ask":
            p = answers[f"{name}.e{k}"].p_yes()
            how = percent_label(p)
        else:
            p = 1.0 if check.status == "verbatim" else 0.0
            how = "verbatim" if check.status == "verbatim" else "no number in the context"
        ps.append(p)
        label = f"{json.dumps(check.entity, ensure_ascii=False)}: {how}"
        details.append(
            ChunkDetail(index=k, label=label, score=p, probability=p, confidence=decisiveness(p), passed=p >= 0.5)
        )
    level = level_of_share(sum(d.passed for d in details), len(details), top)
    levels = share_levels(ps, top)
    return EvaluatorResult(
        **_base(defn, threshold),
        score=level / top,
        label=level_label(level, top),
        confidence=_clip01(levels[level]),
        probabilities={str(i): p for i, p in enumerate(levels)},
        legend={str(i): lv for i, lv in enumerate(defn.levels or ())},
        passed=level / top >= threshold,
        details=details,
    )


def share_levels(ps: Sequence[float], top: int) -> list[float]:
    """P(level) for level 0..top when each of N units holds with probability ``ps[i]``
    (independently): the count's Poisson-binomial distribution (:func:`count_distribution`),
    each count k mapped to :func:`level_of_share` (k, N)."""
    levels = [0.0] * (top + 1)
    for k, pk in enumerate(count_distribution(ps)):
        levels[level_of_share(k, len(ps), top)] += pk
    return levels


def answer_features(defn: EvaluatorDef, answers: Mapping[str, Answered]) -> dict[str, float]:
    """The features of ``answer_probes`` scoring.

    - ``<probe>``: logit P(yes) of the probe over the output alone;
    - ``<probe>_rel``: that minus the same over the content-free output ``N/A`` (Zhao et al.
      2021, "Calibrate Before Use");
    - ``pad`` (with a ``sentence_probe``): the largest gap, in logits of P(yes), between the
      output's best sentence and another of its sentences: 0 for one sentence or sentences that
      all help alike, large when a sentence helps much less than the answer's best one (padding,
      drift).
    """
    name = defn.name
    feats: dict[str, float] = {}
    for p in defn.probes or {}:
        feats[p] = clipped_logit(answers[f"{name}.whole.{p}"].p_yes())
        feats[f"{p}_rel"] = feats[p] - clipped_logit(answers[f"{name}.null.{p}"].p_yes())
    if defn.sentence_probe:
        sentences = [clipped_logit(a.p_yes()) for qid, a in answers.items() if qid.startswith(f"{name}.s")]
        feats["pad"] = max(sentences) - min(sentences) if sentences else 0.0
    return feats


def score_answer_probes(defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float) -> EvaluatorResult:
    """Levels from :func:`answer_features` by the definition's fitted ``classes`` (one linear
    score per level, their softmax: multinomial logistic regression; a multinomial, not an
    ordered model, since padding lowers a complete answer's level but raises a partial one's
    above "misses the point"); then the rubric's result shape: score = E[level]/(L-1), ``label``
    "x.x / top" of the expected level, ``probabilities`` per level, ``confidence`` the score
    answer's, passed when score >= threshold; ``details`` one row per sentence probed ("nn% yes"
    that it helps); ``x_features`` on each detail is the item's features."""
    feats = answer_features(defn, answers)
    classes = defn.classes or {}
    top = defn.top_level
    z = [
        classes[str(k)].intercept + sum(w * feats[f] for f, w in classes[str(k)].weights.items())
        for k in range(top + 1)
    ]
    probs = _softmax(z)
    expected = sum(k * p for k, p in enumerate(probs))
    sentences = [(qid, a.p_yes()) for qid, a in answers.items() if qid.startswith(f"{defn.name}.s")]
    details = [
        ChunkDetail(
            index=j,
            label=percent_label(p),
            score=p,
            probability=p,
            confidence=decisiveness(p),
            passed=p >= 0.5,
            x_features=feats if j == 0 else None,
        )
        for j, (_, p) in enumerate(sentences)
    ]
    return EvaluatorResult(
        **_base(defn, threshold),
        score=_clip01(expected / top),
        label=level_label(expected, top),
        confidence=_clip01(answer_fields.score_confidence(probs)),
        probabilities={str(k): p for k, p in enumerate(probs)},
        legend={str(k): lv for k, lv in enumerate(defn.levels or ())},
        passed=expected / top >= threshold,
        details=details or None,
        x_features=feats,
    )


def score_groups(
    defn: EvaluatorDef, answers: Mapping[str, Answered], threshold: float | None, item: Item
) -> EvaluatorResult:
    """Dispatch a :data:`GROUP_SCORINGS` evaluator: ``answers`` by question id
    (:func:`logitjudge.rubrics.questions.build_groups`), ``item`` for its chunks and entities.

    Raises:
        KeyError: an answer the scoring needs is missing.
    """
    limit = defn.threshold if threshold is None else threshold
    if defn.scoring == "chunk_evidence":
        return score_chunk_evidence(defn, answers, limit, len(item.chunks()))
    if defn.scoring == "chunk_probes":
        return score_chunk_probes(defn, answers, limit, len(item.chunks()))
    if defn.scoring == "answer_probes":
        return score_answer_probes(defn, answers, limit)
    if defn.scoring == "chunk_head":
        return score_chunk_head(defn, answers, limit, len(item.chunks()))
    from logitjudge.rubrics.questions import entity_checks

    checks = entity_checks(item)
    if not checks:
        return skipped(defn, "no entity (name, number, date or quoted term) found in `expected`")
    return score_entity_recall(defn, answers, limit, checks)
