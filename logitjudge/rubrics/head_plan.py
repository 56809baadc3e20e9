"""Which trained heads read an item's questions: applied to an item's plan before it is sent.

A loaded head reads a question only where it was trained: a definition that names a ``head``
(``chunk_support@4``, ``context_entity_recall@3``) is answered by its fallback version when the
engine has no head of that name trained on its question; an evaluator of one question over the
item is read by a head of its own name (one you trained with ``logitjudge fit --evaluator NAME``)
trained on that very version. Which version a head was trained on is its folder's ``evaluator``
(``describe()["head_evaluators"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from logitjudge.rubrics.kinds import kind_of
from logitjudge.rubrics.registry import Registry, Selected

if TYPE_CHECKING:
    from logitjudge.rubrics.definitions import EvaluatorDef
    from logitjudge.rubrics.runner import ItemPlan

__all__ = [
    "adapter_for",
    "answers_itself",
    "with_adapters",
    "head_fallback_warning",
    "reads_own_head",
    "head_trained_for",
    "own_head",
    "other_version_note",
    "with_head_fallbacks",
]


def head_fallback_warning(defn: EvaluatorDef, fallback: EvaluatorDef, engine: Mapping[str, Any]) -> str:
    """The ``x_warning`` of a result answered by ``fallback`` because the engine has no head for
    ``defn`` (none of its name, or one trained on another evaluator's question)."""
    assert defn.head is not None
    said = (
        f"{defn.name}@{defn.version} reads a branch adapter or a trained head {defn.head.name!r}, and none trained "
        f"for it is loaded for {engine.get('model')!r}: answered by {fallback.name}@{fallback.version} instead. "
    )
    if engine.get("backend", "transformers") != "transformers":  # vLLM runs no heads or adapters
        return said + "Serve it with --backend transformers to use one (docs/guides/adapters.md)."
    return said + (
        f"Train an adapter for this model with `logitjudge fit --evaluator {defn.name}@{defn.version} --adapter` "
        "and pass it with --adapters (docs/guides/adapters.md), or a head with "
        f"`logitjudge fit --evaluator {defn.name}` and --heads (docs/guides/evaluate.md, 'Train a head')."
    )


def reads_own_head(defn: EvaluatorDef) -> bool:
    """True when a head named after ``defn`` (trained by ``logitjudge fit --evaluator NAME`` on your
    labels) can read its question: one typed question over the whole item (a kind that says so,
    :attr:`~logitjudge.rubrics.kinds.base.ScoringKind.reads_own_head`: ``probability`` or
    ``rubric`` scoring, not over a state of ``state_fields``)."""
    kind = kind_of(defn)
    return (
        defn.head is None
        and kind.reads_own_head
        and not (kind.per_chunk or kind.per_claim)
        and defn.state_fields is None
    )


def head_trained_for(defn: EvaluatorDef, head: str, engine: Mapping[str, Any]) -> bool:
    """True when ``engine`` (a ``describe()`` dict) has the head called ``head`` loaded
    (``engine["heads"]``) and it was trained on ``defn``'s very version
    (``engine["head_evaluators"]``, from its folder; a head that does not say is taken as trained
    on it)."""
    if head not in (engine.get("heads") or ()):
        return False
    trained_for = (engine.get("head_evaluators") or {}).get(head)
    return trained_for is None or trained_for == f"{defn.name}@{defn.version}"


def answers_itself(defn: EvaluatorDef, engine: Mapping[str, Any]) -> bool:
    """True when ``defn`` (of a ``head``) is answered as this very version on ``engine``: by its
    head (:func:`head_trained_for`) or by a branch adapter bound to it (:func:`adapter_for`);
    False means its ``head.fallback`` version answers."""
    return defn.head is not None and (head_trained_for(defn, defn.head.name, engine) or bool(adapter_for(defn, engine)))


def own_head(defn: EvaluatorDef, engine: Mapping[str, Any]) -> bool:
    """True when a loaded head named after ``defn`` reads its question (:func:`reads_own_head`)
    and was trained on this version's question (:func:`head_trained_for`): a head trained for
    ``answer_relevancy@1`` does not read another version's question, nor does the per-entity
    head of ``context_entity_recall@3`` read version 1's score question."""
    return reads_own_head(defn) and head_trained_for(defn, defn.name, engine)


def other_version_note(defn: EvaluatorDef, engine: Mapping[str, Any]) -> str:
    """The ``x_warning`` of a result whose evaluator has a loaded head of its name trained on
    another version's question (so the head is not read)."""
    trained_for = (engine.get("head_evaluators") or {}).get(defn.name)
    return (
        f"the loaded head {defn.name!r} was trained on {trained_for}'s question, not "
        f"{defn.name}@{defn.version}'s: it is not read here. Select {trained_for}, or train a head for this "
        f"version with `logitjudge fit --evaluator {defn.name}@{defn.version}`."
    )


def with_head_fallbacks(plan: ItemPlan, registry: Registry, engine: Mapping[str, Any]) -> ItemPlan:
    """``plan`` with the trained heads of ``engine`` (a ``describe()`` dict) applied (in place,
    and returned):

    - an evaluator whose definition names a head the engine lacks, or has loaded trained on
      another evaluator's question (``head``, :func:`head_trained_for`), is replaced by its
      fallback version (``head.fallback``; its questions rebuilt, its results noted with
      :func:`head_fallback_warning`);
    - an evaluator without a ``head`` of its own but with a loaded head of its name, trained on
      its question (:func:`own_head`: a head you trained on your labels) has its question read
      by that head, and its ``contrast`` twin is not asked: the score is the head's P(yes) (or
      its levels' E[level] / top). When that head was trained on another version's question,
      the catalogue's current version is answered without it and its results say so
      (:func:`other_version_note`; a version selected by number is not noted).

    Raises:
        KeyError: the fallback version is not in ``registry``.
    """
    for k, (sel, ids) in enumerate(plan.owners):
        defn = sel.definition
        if defn.head is None:
            if own_head(defn, engine):
                for qid in ids:
                    plan.questions[qid] = replace(plan.questions[qid], head=defn.name)
                    plan.contrast.pop(qid, None)
                plan.owners[k] = (Selected(defn.model_copy(update={"contrast": None}), sel.explicit), ids)
            elif (
                defn.name in (engine.get("heads") or ())
                and reads_own_head(defn)
                and registry.evaluators.get(defn.name) == defn
            ):
                plan.notes[defn.name] = other_version_note(defn, engine)
            continue
        if answers_itself(defn, engine):
            continue
        fallback = registry.versions[f"{defn.name}@{defn.head.fallback}"]
        plan.drop(ids)
        plan.add(Selected(fallback, sel.explicit), kind_of(fallback).questions(fallback, plan.item))
        plan.owners[k] = plan.owners.pop()
        plan.notes[defn.name] = head_fallback_warning(defn, fallback, engine)
    return with_adapters(plan, engine)


def adapter_for(defn: EvaluatorDef, engine: Mapping[str, Any]) -> str | None:
    """The loaded branch adapter trained on ``defn``'s very version (its binding's ``evaluator``,
    ``describe()["adapter_evaluators"]``), or ``None``."""
    wanted = f"{defn.name}@{defn.version}"
    for name, trained_for in (engine.get("adapter_evaluators") or {}).items():
        if trained_for == wanted:
            return str(name)
    return None


def with_adapters(plan: ItemPlan, engine: Mapping[str, Any]) -> ItemPlan:
    """``plan`` with the loaded branch adapters applied (in place, and returned): every question of
    an evaluator that a loaded adapter was trained on (:func:`adapter_for`) names that adapter, in
    the item's request and in its chunk groups alike, read from its label logits (a head of the
    evaluator is not read: it was fitted on the base model's states), and its ``contrast`` twin is
    not asked (the adapter was trained to answer the question with the context, as a head reads it)."""
    for k, (sel, ids) in enumerate(plan.owners):
        name = adapter_for(sel.definition, engine)
        if name is None:
            continue
        keys = set(ids)
        for qid in keys & plan.questions.keys():
            plan.questions[qid] = replace(plan.questions[qid], adapter=name, head=None)
            plan.contrast.pop(qid, None)
        for _state, qs in plan.groups.values():
            for qid in keys & qs.keys():
                qs[qid] = replace(qs[qid], adapter=name, head=None)
        if sel.definition.contrast is not None:
            plan.owners[k] = (Selected(sel.definition.model_copy(update={"contrast": None}), sel.explicit), ids)
    return plan
