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
from dataclasses import replace
from functools import cache
from typing import Any

import pysbd

from logitjudge.contract.evaluate import Item
from logitjudge.convert import question_to_engine
from logitjudge.engine.prompt import render_text
from logitjudge.engine.types import Option, Question
from logitjudge.rubrics.definitions import EvaluatorDef
from logitjudge.rubrics.entities import EntityCheck, check_entities
from logitjudge.rubrics.items import parse_typed_question

__all__ = [
    "question_ids",
    "build_questions",
    "build_groups",
    "chunk_text",
    "claims_of",
    "split_sentences",
    "MAIN_GROUP",
    "NULL_GROUP",
]


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


def support_claims(item: Item) -> list[str]:
    """The claims chunk support probes ask about: :func:`claims_of`, each sentence split again
    at semicolons ("billed at $0.042 per million; output tokens are free" is two claims)."""
    return [part.strip() for claim in claims_of(item) for part in claim.split(";") if part.strip()]


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


MAIN_GROUP = "item"
"""The group of questions asked over the whole item (every data field in the state)."""
NULL_GROUP = "null"
"""The group asked over a content-free chunk (the baseline of per-chunk evaluators)."""
ANSWER_GROUP = "answer"
"""The group asked over the output alone (``answer_probes``); ``answer:s<j>`` over its sentence j."""
ANSWER_NULL_GROUP = "answer:null"
"""The group asked over the content-free output ``N/A`` (the baseline of ``answer_probes``)."""


def chunk_group(index: int) -> str:
    """The group of questions asked over chunk ``index`` alone."""
    return f"chunk:{index}"


def fields_group(fields: tuple[str, ...]) -> str:
    """The group of questions asked over a state of ``fields`` only."""
    return "fields:" + ",".join(fields)


def chunk_state(chunk: Any) -> str:
    """The state of a chunk's own request: ``"Passage: <chunk>"`` (a structured chunk as canonical JSON)."""
    return "Passage: " + render_text(chunk)


def quote_fields(template: str, item: Item) -> str:
    """``{input}`` / ``{output}`` / ``{expected}`` in ``template`` -> the field's text as a JSON string."""
    for name in ("input", "output", "expected"):
        key = "{" + name + "}"
        if key in template:
            template = template.replace(key, json.dumps(render_text(getattr(item, name)), ensure_ascii=False))
    return template


def _noul(text: str, true: str | None = None, false: str | None = None) -> Question:
    return Question("noul", text, (Option("true", true), Option("false", false)), calibrated=False)


Group = tuple[Any, dict[str, Question]]
"""A group's state and its questions by namespaced id."""


def head_question(defn: EvaluatorDef, claim: str, item: Item) -> Question:
    """The question a ``chunk_head`` evaluator asks over one chunk about one ``claim``: its
    ``template`` (``{claim}`` quoting it, ``{input}`` etc. the item's fields) as a choice over its
    options, read by its trained head. ``logitjudge fit`` trains the head on exactly this question."""
    text = quote_fields((defn.template or "").replace("{claim}", json.dumps(claim, ensure_ascii=False)), item)
    options = tuple(Option(o.name, o.description) for o in defn.options or ())
    return Question("choice", text, options, calibrated=False, head=defn.head.name if defn.head else None)


def entity_checks(item: Item) -> list[EntityCheck]:
    """The entities of the item's ``expected`` and what the rules settle about each against its
    chunks (:func:`logitjudge.rubrics.entities.check_entities`); the one place both the
    questions and the scoring read them from."""
    context = " \n".join(render_text(c) for c in item.chunks())
    return check_entities(render_text(item.expected), context)


def build_groups(defn: EvaluatorDef, item: Item) -> dict[str, Group]:
    """``{group key: (state, {namespaced id: question})}`` for an evaluator whose questions are
    not asked over the whole item (``chunk_state``, ``state_fields`` or ``entity_recall``).

    Ids: ``chunk_evidence``: ``<name>.<i>`` (the noul over chunk i), ``<name>.<i>.lik`` (its
    continuation), ``<name>.null`` and ``<name>.null.lik`` over the content-free chunk.
    ``chunk_probes``: ``<name>.<i>.<probe>`` per probe, and the same for ``null``
    (``claim_probes``: ``<name>.<i>.c<j>.<probe>`` per claim j).
    ``chunk_head``: ``<name>.<i>.c<j>`` per chunk i and claim j.
    ``entity_recall``: ``<name>.e<k>`` for each entity k not found verbatim in the context (none
    when every entity is found). ``answer_probes``: ``<name>.whole.<probe>`` and
    ``<name>.null.<probe>`` per probe, ``<name>.s<j>`` per sentence (two or more). Other
    scorings: their usual ids over a state of ``state_fields``.
    Questions carry ``calibrated=False``: the engine's calibration (fitted on typed questions)
    never scales them.
    """
    groups: dict[str, Group] = {}

    def add(key: str, state: Any, qid: str, q: Question) -> None:
        groups.setdefault(key, (state, {}))[1][qid] = q

    name = defn.name
    crit = defn.criteria
    if defn.scoring == "entity_recall":
        fields = defn.state_fields or ("context",)
        state: Any = {f: (item.chunks() if f == "context" else getattr(item, f)) for f in fields}
        for k, check in enumerate(entity_checks(item)):
            if check.status == "ask":
                text = (defn.entity_template or "").replace("{entity}", json.dumps(check.entity, ensure_ascii=False))
                add(fields_group(fields), state, f"{name}.e{k}", _noul(text))
        return groups
    if defn.scoring == "answer_probes":

        def answer_unit(text: str) -> str:
            return (defn.answer_state or "").replace("{input}", render_text(item.input)).replace("{answer}", text)

        output = render_text(item.output)
        for key, text, tag in ((ANSWER_GROUP, output, "whole"), (ANSWER_NULL_GROUP, "N/A", "null")):
            for probe, template in (defn.probes or {}).items():
                add(key, answer_unit(text), f"{name}.{tag}.{probe}", _noul(quote_fields(template, item)))
        sentences = split_sentences(output) if isinstance(item.output, str) else []
        if defn.sentence_probe and len(sentences) >= 2:
            helps = _noul(quote_fields(defn.sentence_probe, item))
            for j, sentence in enumerate(sentences):
                add(f"{ANSWER_GROUP}:s{j}", answer_unit(sentence), f"{name}.s{j}", helps)
        return groups
    if defn.scoring == "chunk_head":
        claims = support_claims(item)
        for i, c in enumerate(item.chunks()):
            for j, claim in enumerate(claims):
                add(chunk_group(i), chunk_state(c), f"{name}.{i}.c{j}", head_question(defn, claim, item))
        return groups
    if defn.chunk_state:
        text = quote_fields(defn.template or "", item)
        null_chunk = defn.likelihood.null_chunk if defn.likelihood else "N/A"
        units = [(chunk_group(i), chunk_state(c), str(i)) for i, c in enumerate(item.chunks())]
        if defn.scoring in ("chunk_evidence", "chunk_probes"):
            units.append((NULL_GROUP, chunk_state(null_chunk), "null"))
        for key, passage, tag in units:
            if defn.scoring == "chunk_probes":
                for probe, template in (defn.probes or {}).items():
                    if not defn.claim_probes:
                        add(key, passage, f"{name}.{tag}.{probe}", _noul(quote_fields(template, item)))
                        continue
                    for j, claim in enumerate(support_claims(item)):
                        text = quote_fields(template.replace("{claim}", json.dumps(claim, ensure_ascii=False)), item)
                        add(key, passage, f"{name}.{tag}.c{j}.{probe}", _noul(text))
                continue
            add(key, passage, f"{name}.{tag}", _noul(text, crit.true if crit else None, crit.false if crit else None))
            if defn.likelihood is not None:
                scored = render_text(getattr(item, defn.likelihood.text))
                q = Question("continuation", defn.likelihood.instructions, (Option(scored),), calibrated=False)
                add(key, passage, f"{name}.{tag}.lik", q)
        return groups
    fields = defn.state_fields or ()
    state = {f: (item.chunks() if f == "context" else getattr(item, f)) for f in fields if item.has(f)}
    qs = build_questions(defn, item)
    groups[fields_group(fields)] = (state, {qid: replace(q, calibrated=False) for qid, q in qs.items()})
    return groups
