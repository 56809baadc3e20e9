"""Evaluator -> typed System One questions: the keys, states and builders every kind shares (spec B.2).

Each question of an evaluator on an item sits under a :class:`QuestionKey`: the evaluator's name
and where the question is asked (chunk 3, the content-free chunk, claim 1 of the output, a probe's
name). Keys never reach the model (an engine request carries the questions alone, in order); they
only route answers back to their evaluator's scoring, which reads them by key, never by parsing a
string. ``str(key)`` spells it for people (``"chunk_relevance.3"``, ``"chunk_support.0.c1"``).

An evaluator's questions for one item (:class:`Planned`) are asked over the whole item's state,
or in groups over other states (:data:`Group`: each chunk alone, a content-free chunk, the output
alone, a state of some fields only); which, is its scoring kind's choice
(:meth:`logitjudge.rubrics.kinds.base.ScoringKind.questions`). The questions are what
``POST /v1/systemone`` would give the engine for the same body (:mod:`logitjudge.convert`): a
noul's options ``(true, false)``, a choice's options by name, a score's levels ``"0"``..``"n-1"``;
the judge's option-order rotations are applied when the item is sent
(:func:`logitjudge.convert.with_rotations`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any

import pysbd

from logitjudge.contract.evaluate import Item
from logitjudge.convert import question_to_engine
from logitjudge.engine.types import Option, Question, render_text
from logitjudge.rubrics.entities import EntityCheck, check_entities
from logitjudge.rubrics.items import parse_typed_question

if TYPE_CHECKING:
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = [
    "QuestionKey",
    "Group",
    "Planned",
    "LIKELIHOOD",
    "MAIN_GROUP",
    "NULL_GROUP",
    "ANSWER_GROUP",
    "ANSWER_NULL_GROUP",
    "build_questions",
    "one_question",
    "noul_question",
    "uncalibrated",
    "head_question",
    "chunk_text",
    "chunk_group",
    "chunk_state",
    "fields_group",
    "fields_state",
    "quote_fields",
    "quote_claim",
    "claims_of",
    "support_claims",
    "split_sentences",
    "entity_checks",
]

LIKELIHOOD = "lik"
"""The ``part`` of a key for a unit's continuation question (chunk_evidence's likelihood)."""


@dataclass(frozen=True)
class QuestionKey:
    """Which question of which evaluator: the typed address of one question in an item's plan.

    Attributes:
        evaluator: the evaluator's name (a plan holds one version of each name).
        chunk: the chunk the question is asked over or about (0-based); None when not per chunk.
        null: asked over the content-free unit instead (the ``N/A`` chunk or output).
        claim: the claim of the output the question quotes (0-based, :func:`claims_of` /
            :func:`support_claims` order).
        sentence: the sentence of the output the question is asked over (0-based).
        entity: the entity of ``expected`` it asks about (0-based, :func:`entity_checks` order).
        part: which of the unit's questions: a probe's name, or :data:`LIKELIHOOD`.
    """

    evaluator: str
    chunk: int | None = None
    null: bool = False
    claim: int | None = None
    sentence: int | None = None
    entity: int | None = None
    part: str | None = None

    def __str__(self) -> str:
        """For people and messages: ``"chunk_support.2.c1"``, ``"chunk_relevance.null.lik"``."""
        parts = [self.evaluator]
        if self.null:
            parts.append("null")
        elif self.chunk is not None:
            parts.append(str(self.chunk))
        parts += [
            f"{tag}{n}" for tag, n in (("s", self.sentence), ("e", self.entity), ("c", self.claim)) if n is not None
        ]
        if self.part is not None:
            parts.append(self.part)
        return ".".join(parts)


Group = tuple[Any, dict[QuestionKey, Question]]
"""A group's state and its questions by key."""

MAIN_GROUP = "item"
"""The group of questions asked over the whole item (every data field in the state)."""
NULL_GROUP = "null"
"""The group asked over a content-free chunk (the baseline of per-chunk evaluators)."""
ANSWER_GROUP = "answer"
"""The group asked over the output alone (``answer_probes``); ``answer:s<j>`` over its sentence j."""
ANSWER_NULL_GROUP = "answer:null"
"""The group asked over the content-free output ``N/A`` (the baseline of ``answer_probes``)."""


@dataclass
class Planned:
    """One evaluator's questions for one item.

    Attributes:
        item: asked over the whole item's state (the item's one request; an evaluator with
            ``contrast`` asks them again over the state without ``context``).
        groups: asked over other states, by group key (:func:`chunk_group`, :data:`NULL_GROUP`,
            ...); the questions of every evaluator in one group share its request.
    """

    item: dict[QuestionKey, Question] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)

    def add(self, group: str, state: Any, key: QuestionKey, question: Question) -> None:
        """Put ``question`` under ``key`` in ``group`` (over ``state``, set by the group's first question)."""
        self.groups.setdefault(group, (state, {}))[1][key] = question

    def keys(self) -> list[QuestionKey]:
        """Every key, the whole item's first, then the groups' in order."""
        return [*self.item, *(k for _, qs in self.groups.values() for k in qs)]


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


def quote_claim(template: str, claim: str) -> str:
    """``{claim}`` in ``template`` -> the claim as a JSON string."""
    return template.replace("{claim}", json.dumps(claim, ensure_ascii=False))


def one_question(defn: EvaluatorDef, instructions: str) -> Question:
    """``defn``'s question type over ``instructions``: a noul with its criteria, a choice over its
    options, or a score over its levels (``"0"``..``"n-1"``, each described by its level)."""
    if defn.question_type == "noul":
        crit = defn.criteria
        true, false = (None, None) if crit is None else (crit.true, crit.false)
        return Question("noul", instructions, (Option("true", true), Option("false", false)))
    if defn.question_type == "choice":
        return Question("choice", instructions, tuple(Option(o.name, o.description) for o in defn.options or ()))
    return Question("score", instructions, tuple(Option(str(i), level) for i, level in enumerate(defn.levels or ())))


def build_questions(
    defn: EvaluatorDef, item: Item, *, field: tuple[str | int, ...] = ("question",)
) -> dict[QuestionKey, Question]:
    """``{key: question}`` for ``defn`` over the whole item (required fields assumed present): its
    ``template`` once (key ``(name)``), per chunk (``chunk=i``, `` `context[i]` `` naming the
    chunk) or per claim (``claim=j``, ``{claim}`` quoting it), or the item's own typed question.

    Raises:
        InvalidRequestError: a ``typed`` evaluator and the item's ``question`` is not a valid
            System One question (``field`` locates it).
    """
    name = defn.name
    if defn.question_type == "typed":
        return {QuestionKey(name): question_to_engine(parse_typed_question(item.question or {}, field=field))}
    template = defn.template or ""
    if defn.per_chunk:
        return {
            QuestionKey(name, chunk=i): one_question(defn, chunk_text(template, i)) for i in range(len(item.chunks()))
        }
    if defn.per_claim:
        claims = claims_of(item)
        return {QuestionKey(name, claim=j): one_question(defn, quote_claim(template, c)) for j, c in enumerate(claims)}
    return {QuestionKey(name): one_question(defn, template)}


def chunk_group(index: int) -> str:
    """The group of questions asked over chunk ``index`` alone."""
    return f"chunk:{index}"


def fields_group(fields: tuple[str, ...]) -> str:
    """The group of questions asked over a state of ``fields`` only."""
    return "fields:" + ",".join(fields)


def fields_state(item: Item, fields: tuple[str, ...], *, present: bool = True) -> dict[str, Any]:
    """The state of ``fields`` only (``context`` as its list of chunks); with ``present``, the
    fields the item has, else every one of them."""
    return {f: (item.chunks() if f == "context" else getattr(item, f)) for f in fields if not present or item.has(f)}


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


def noul_question(text: str, true: str | None = None, false: str | None = None) -> Question:
    """A yes/no question the engine's calibration never scales (``calibrated=False``)."""
    return Question("noul", text, (Option("true", true), Option("false", false)), calibrated=False)


def uncalibrated(questions: dict[QuestionKey, Question]) -> dict[QuestionKey, Question]:
    """``questions`` with ``calibrated=False`` (asked over a state of some fields only)."""
    return {key: replace(q, calibrated=False) for key, q in questions.items()}


def head_question(defn: EvaluatorDef, claim: str, item: Item) -> Question:
    """The question a ``chunk_head`` evaluator asks over one chunk about one ``claim``: its
    ``template`` (``{claim}`` quoting it, ``{input}`` etc. the item's fields) as a choice over its
    options, read by its trained head. ``logitjudge fit`` trains the head on exactly this question."""
    text = quote_fields(quote_claim(defn.template or "", claim), item)
    options = tuple(Option(o.name, o.description) for o in defn.options or ())
    return Question("choice", text, options, calibrated=False, head=defn.head.name if defn.head else None)


def entity_checks(item: Item) -> list[EntityCheck]:
    """The entities of the item's ``expected`` and what the rules settle about each against its
    chunks (:func:`logitjudge.rubrics.entities.check_entities`); the one place both the
    questions and the scoring read them from."""
    context = " \n".join(render_text(c) for c in item.chunks())
    return check_entities(render_text(item.expected), context)
