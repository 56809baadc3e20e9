"""``answer_probes``: named yes/no probes over the output alone and over a content-free output,
one probe per sentence of the output, mapped to the levels by a fitted multinomial logistic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from logitjudge.contract.evaluate import ChunkDetail, EvaluatorResult, Item
from logitjudge.engine import answers as answer_fields
from logitjudge.engine.answers import decisiveness
from logitjudge.engine.types import render_text
from logitjudge.rubrics.kinds.base import Answers, ScoringKind, check_classes
from logitjudge.rubrics.questions import (
    ANSWER_GROUP,
    ANSWER_NULL_GROUP,
    Planned,
    QuestionKey,
    noul_question,
    quote_fields,
    split_sentences,
)
from logitjudge.rubrics.results import (
    Answered,
    base_fields,
    clip01,
    clipped_logit,
    level_label,
    percent_label,
    softmax,
)

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = ["AnswerProbes", "answer_features", "score_answer_probes"]

NULL_ANSWER = "N/A"
"""The content-free output the probes are also asked over."""


def _sentences(answers: Answers) -> list[Answered]:
    """The sentence probe's answers, in sentence order."""
    return [answers[k] for k in sorted((k for k in answers if k.sentence is not None), key=lambda k: k.sentence or 0)]


def answer_features(defn: EvaluatorDef, answers: Answers) -> dict[str, float]:
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
        feats[p] = clipped_logit(answers[QuestionKey(name, part=p)].p_yes())
        feats[f"{p}_rel"] = feats[p] - clipped_logit(answers[QuestionKey(name, null=True, part=p)].p_yes())
    if defn.sentence_probe:
        sentences = [clipped_logit(a.p_yes()) for a in _sentences(answers)]
        feats["pad"] = max(sentences) - min(sentences) if sentences else 0.0
    return feats


def score_answer_probes(defn: EvaluatorDef, answers: Answers, threshold: float) -> EvaluatorResult:
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
    probs = softmax(z)
    expected = sum(k * p for k, p in enumerate(probs))
    sentences = [a.p_yes() for a in _sentences(answers)]
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
        for j, p in enumerate(sentences)
    ]
    return EvaluatorResult(
        **base_fields(defn, threshold),
        score=clip01(expected / top),
        label=level_label(expected, top),
        confidence=clip01(answer_fields.score_confidence(probs)),
        probabilities={str(k): p for k, p in enumerate(probs)},
        legend={str(k): lv for k, lv in enumerate(defn.levels or ())},
        passed=expected / top >= threshold,
        details=details or None,
        x_features=feats,
    )


class AnswerProbes(ScoringKind):
    """Over ``answer_state`` of the output (keys ``part`` = each probe's name) and of the
    content-free output (``null``), each of the ``probes``; over each sentence of a longer output
    (``sentence=j``), the ``sentence_probe``: :func:`score_answer_probes`. ``question_type``
    (score) is the result's shape."""

    name = "answer_probes"
    question_type = "score"
    fields: ClassVar[Mapping[str, bool]] = {
        "probes": True,
        "classes": True,
        "answer_state": True,
        "sentence_probe": False,
    }
    needs_template = False
    quotes_fields = True

    def placeholders(self, defn: EvaluatorDef) -> frozenset[str]:
        return frozenset({"answer"})

    def texts(self, defn: EvaluatorDef) -> list[str]:
        return [t for t in (defn.sentence_probe,) if t] + list((defn.probes or {}).values())

    def check(self, defn: EvaluatorDef) -> None:
        if "{answer}" not in (defn.answer_state or ""):
            raise ValueError(f"{defn.name}: answer_state must hold {{answer}}")
        known = {f"{p}{suffix}" for p in defn.probes or {} for suffix in ("", "_rel")}
        check_classes(defn, known | ({"pad"} if defn.sentence_probe else set()))

    def questions(self, defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)) -> Planned:
        def unit(text: str) -> str:
            return (defn.answer_state or "").replace("{input}", render_text(item.input)).replace("{answer}", text)

        output = render_text(item.output)
        planned = Planned()
        for group, text, null in ((ANSWER_GROUP, output, False), (ANSWER_NULL_GROUP, NULL_ANSWER, True)):
            for probe, template in (defn.probes or {}).items():
                key = QuestionKey(defn.name, null=null, part=probe)
                planned.add(group, unit(text), key, noul_question(quote_fields(template, item)))
        sentences = split_sentences(output) if isinstance(item.output, str) else []
        if defn.sentence_probe and len(sentences) >= 2:
            helps = noul_question(quote_fields(defn.sentence_probe, item))
            for j, sentence in enumerate(sentences):
                planned.add(f"{ANSWER_GROUP}:s{j}", unit(sentence), QuestionKey(defn.name, sentence=j), helps)
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
        return score_answer_probes(defn, answers, threshold)
