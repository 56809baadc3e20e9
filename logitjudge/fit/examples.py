"""The examples a head is fitted on: labelled rows -> the evaluator's own engine requests.

Each example is one engine request: the state the evaluator asks over (for ``chunk_head``
evaluators the chunk alone, ``"Passage: <chunk>"``) and the evaluator's own question
(:func:`logitjudge.rubrics.questions.head_question`), so the head reads at serving time exactly
the states it was trained on, with the gold option and the group the row belongs to (rows of one
group never straddle a split).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from logitjudge.engine.types import Question, render_text
from logitjudge.rubrics.api import to_item
from logitjudge.rubrics.definitions import EvaluatorDef


@dataclass(frozen=True)
class Example:
    """One labelled engine request: a state, the evaluator's question, the gold option.

    Attributes:
        key: ``<row id>#<chunk>``, unique in a fit.
        group: rows of one group stay on one side of every split (a claim's edits, a premise).
        source: the data set the row comes from (per-source figures).
        label: the gold option's name.
    """

    key: str
    group: str
    source: str
    state: Any
    question: Question
    label: str


def _group_of(row: Mapping[str, Any], text: str) -> str:
    """The group of a row: ``meta.case_id`` / ``group`` / ``pairID`` / ``captionID`` / ``uid`` when present,
    else the source item of an id with three or more ``:`` fields (``halueval_qa:12:right``:
    :func:`~logitjudge.rubrics.samples.item_group`), else the text (rows sharing a passage)."""
    meta = row.get("meta") or {}
    for k in ("case_id", "group", "pairID", "captionID", "uid"):
        if isinstance(meta, Mapping) and meta.get(k):
            return f"{k}:{meta[k]}"
    rid = str(row.get("id") or "")
    if rid.count(":") >= 2:
        from logitjudge.rubrics.samples import item_group

        return "item:" + item_group(rid)
    return "text:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def _gold_option(value: Any, question: Question) -> str | None:
    """The option a gold value names: a bool for a noul (``true``/``false``), an option name,
    or a level index (int or its string) for a score; None when it names none."""
    names = [str(o.name) for o in question.options]
    if isinstance(value, bool):
        return "true" if value else "false" if question.type == "noul" else None
    if isinstance(value, int) and question.type == "score":
        value = str(value)
    return str(value) if str(value) in names else None


def head_examples(defn: EvaluatorDef, rows: Iterable[Mapping[str, Any]], *, label_key: str = "label") -> list[Example]:
    """The training examples of the head an evaluator reads.

    - An evaluator whose definition names a ``head``: its scoring kind's labelled questions
      (:meth:`~logitjudge.rubrics.kinds.base.ScoringKind.head_examples`): for ``chunk_head``
      (``chunk_support``) per chunk with a gold label (``gold.per_chunk[i]``, or ``gold.label``
      for a one-chunk row), the chunk as the state and the question about the whole output; for
      ``entity_recall`` (``context_entity_recall``) per entity the rules leave to the model,
      labelled by ``gold.entities`` and ``gold.present``.
    - An evaluator of one question over the whole item (:func:`~logitjudge.rubrics.head_plan.reads_own_head`:
      ``probability`` or ``rubric`` scoring, e.g. ``faithfulness``): the item's state and the
      evaluator's question, labelled by ``gold[label_key]`` (a bool for a yes/no question, an
      option name, or a level index). Rows without that label are skipped.

    Raises:
        ValueError: the evaluator cannot read a head, or a gold label names no option (named).
    """
    from logitjudge.rubrics.head_plan import reads_own_head
    from logitjudge.rubrics.questions import build_questions

    if defn.head is None and not reads_own_head(defn):
        raise ValueError(
            f"{defn.name}@{defn.version} is not read by a trained head (no `head` in its definition, and not one "
            "question over the whole item)"
        )
    from logitjudge.rubrics.kinds import kind_of

    kind = kind_of(defn)
    out: list[Example] = []
    for n, row in enumerate(rows):
        rid = row.get("id", n)
        item = to_item(row, where=f"row {rid!r}")
        gold = row.get("gold") or {}
        rid_text = str(row.get("id", ""))
        source = rid_text.split(":", 1)[0] if ":" in rid_text else "rows"
        if defn.head is None:
            if not all(item.has(f) for f in defn.required) or not isinstance(gold, Mapping):
                continue
            (question,) = build_questions(defn, item).values()
            label = _gold_option(gold.get(label_key), question)
            if label_key in gold and label is None:
                raise ValueError(f"row {rid!r}: gold.{label_key} = {gold[label_key]!r} names no option")
            if label is not None:
                state = render_text(item.state())
                out.append(Example(f"{rid}", _group_of(row, state), source, item.state(), question, label))
            continue
        if not isinstance(gold, Mapping) or not all(item.has(f) for f in defn.required):
            continue
        try:
            found = kind.head_examples(defn, item, gold) or []
        except ValueError as e:
            raise ValueError(f"row {rid!r}: {e}") from None
        for ex in found:
            group = _group_of(row, render_text(ex.state))
            out.append(Example(f"{rid}{ex.key}", group, source, ex.state, ex.question, ex.label))
    return out
