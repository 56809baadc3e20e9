"""Evaluator -> typed System One questions over the item's state (spec B.2).

Each evaluator becomes one :class:`~logitjudge.engine.types.Question`, or one per chunk, under a
namespaced id: ``"faithfulness"`` for a single question, ``"chunk_relevance.3"`` for chunk 3,
``"<name>.1"`` for the second claim of a per-claim evaluator.
Ids never reach the model (the engine request carries the questions alone, in order); they only
route answers back to their evaluator. The questions are what ``POST /v1/systemone`` would give
the engine for the same body (:mod:`logitjudge.convert`): a noul's options ``(true, false)``, a
choice's options by name, a score's levels ``"0"``..``"n-1"``; the judge's option-order rotations
are applied when the item is sent (:func:`logitjudge.convert.with_rotations`).
"""

from __future__ import annotations

import json
from functools import cache

import pysbd

from logitjudge.contract.evaluate import Item
from logitjudge.convert import question_to_engine
from logitjudge.engine.types import Option, Question
from logitjudge.rubrics.definitions import EvaluatorDef
from logitjudge.rubrics.items import parse_typed_question

__all__ = ["question_ids", "build_questions", "chunk_text", "claims_of", "split_sentences"]


def chunk_text(template: str, index: int) -> str:
    """The template for chunk ``index``: `` `context[i]` `` -> `` `context[3]` ``."""
    return template.replace("`context[i]`", f"`context[{index}]`")


@cache
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, blanks dropped (``[]`` for blank text).

    Rule-based and deterministic: pySBD (Sadvilkar & Neumann 2020, "PySBD: Pragmatic Sentence
    Boundary Disambiguation"; the splitter RAGAS uses), English rules, text not cleaned.
    """
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]


def claims_of(item: Item) -> list[str]:
    """The claims a per-claim evaluator asks about: the sentences of ``output``
    (:func:`split_sentences`); a structured (JSON) output is one claim, as compact JSON."""
    output = item.output
    if isinstance(output, str):
        return split_sentences(output) or [output.strip()]
    return [json.dumps(output, ensure_ascii=False, separators=(",", ":"))]


def question_ids(defn: EvaluatorDef, n_chunks: int, n_claims: int = 0) -> list[str]:
    """The namespaced ids of ``defn``'s questions: ``[name]``, or ``[name.0, .., name.N-1]``
    for the N chunks (per-chunk) or the N claims (per-claim)."""
    if defn.per_chunk:
        return [f"{defn.name}.{i}" for i in range(n_chunks)]
    if defn.per_claim:
        return [f"{defn.name}.{i}" for i in range(n_claims)]
    return [defn.name]


def _one(defn: EvaluatorDef, instructions: str) -> Question:
    if defn.question_type == "noul":
        crit = defn.criteria
        true, false = (None, None) if crit is None else (crit.true, crit.false)
        return Question("noul", instructions, (Option("true", true), Option("false", false)))
    if defn.question_type == "choice":
        return Question("choice", instructions, tuple(Option(o.name, o.description) for o in defn.options or ()))
    return Question("score", instructions, tuple(Option(str(i), level) for i, level in enumerate(defn.levels or ())))


def build_questions(
    defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)
) -> dict[str, Question]:
    """``{namespaced id: question}`` for ``defn`` on ``item`` (required fields assumed present).

    Raises:
        InvalidRequestError: ``typed_question`` and the item's ``question`` is not a valid
            System One question (``field`` locates it).
    """
    if defn.question_type == "typed":
        return {defn.name: question_to_engine(parse_typed_question(item.question or {}, field=field))}
    template = defn.template or ""
    if defn.per_chunk:
        ids = question_ids(defn, len(item.chunks()))
        return {qid: _one(defn, chunk_text(template, i)) for i, qid in enumerate(ids)}
    if defn.per_claim:
        claims = claims_of(item)
        ids = question_ids(defn, 0, len(claims))
        return {
            qid: _one(defn, template.replace("{claim}", json.dumps(claim, ensure_ascii=False)))
            for qid, claim in zip(ids, claims, strict=True)
        }
    return {defn.name: _one(defn, template)}
