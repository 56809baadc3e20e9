"""Evaluator -> System One questions over the item's state (spec B.2).

Each evaluator becomes one question, or one per chunk, in wire form (the body of
``POST /v1/systemone``'s ``questions``). Ids are namespaced by evaluator: ``"faithfulness"`` for a
single question, ``"chunk_relevance.3"`` for chunk 3. Ids never reach the model, so the
namespace changes nothing about the answers; it only routes answers back to their evaluator.
"""

from __future__ import annotations

from typing import Any

from logitjudge.contract.evaluate import Item
from logitjudge.rubrics.definitions import EvaluatorDef
from logitjudge.rubrics.items import parse_typed_question

__all__ = ["question_ids", "build_questions", "chunk_text"]


def chunk_text(template: str, index: int) -> str:
    """The template for chunk ``index``: `` `context[i]` `` -> `` `context[3]` ``."""
    return template.replace("`context[i]`", f"`context[{index}]`")


def question_ids(defn: EvaluatorDef, n_chunks: int) -> list[str]:
    """The namespaced ids of ``defn``'s questions: ``[name]`` or ``[name.0, .., name.N-1]``."""
    if defn.per_chunk:
        return [f"{defn.name}.{i}" for i in range(n_chunks)]
    return [defn.name]


def _one(defn: EvaluatorDef, instructions: str) -> dict[str, Any]:
    if defn.question_type == "noul":
        q: dict[str, Any] = {"type": "noul", "instructions": instructions}
        if defn.criteria is not None:
            q["criteria"] = defn.criteria.model_dump(exclude_none=True)
        return q
    if defn.question_type == "choice":
        return {
            "type": "choice",
            "instructions": instructions,
            "criteria": {o.name: o.description for o in defn.options or ()},
        }
    return {"type": "score", "instructions": instructions, "criteria": list(defn.levels or ())}


def build_questions(
    defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)
) -> dict[str, dict[str, Any]]:
    """``{namespaced id: wire question}`` for ``defn`` on ``item`` (required fields assumed present).

    Raises:
        InvalidRequestError: ``typed_question`` and the item's ``question`` is not a valid
            System One question (``field`` locates it).
    """
    if defn.question_type == "typed":
        parsed = parse_typed_question(item.question or {}, field=field)
        dumped = parsed.model_dump(mode="json", exclude_none=True)
        return {defn.name: {k: v for k, v in dumped.items() if k in ("type", "instructions", "criteria")}}
    template = defn.template or ""
    if defn.per_chunk:
        ids = question_ids(defn, len(item.chunks()))
        return {qid: _one(defn, chunk_text(template, i)) for i, qid in enumerate(ids)}
    return {defn.name: _one(defn, template)}
