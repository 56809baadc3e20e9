"""Question types: one record per type, read by every stage that treats types differently.

A :class:`QuestionTypeDef` states in one place what a question type is:

- its options: how many (``min_options``..``max_options``) and, for a type whose options are
  fixed, their names (noul: ``true``, ``false``);
- its views: whether option-order rotations apply (``rotates``) and whether a rotated question
  is first put in a canonical order (``order_free``: the options are a set, not levels);
- its readout: a distribution over its options' labels, or the log-likelihood of a text
  (``likelihood``: the continuation readout), and whether a calibration may scale it;
- its prompt: ``render``, the function that writes one view of a question (branch tokens and
  one label per displayed option) with a :class:`~logitjudge.engine.prompt.PromptBuilder`
  (:class:`PromptParts`);
- its answer fields on the ``POST /v1/systemone`` wire (``wire_fields``; ``None``: an engine
  type, not on the wire), and the way back (``read_gold``): a wire answer's distribution and the
  index of a labelled row's gold answer in it, what calibration and Brier/ECE are measured on
  (:mod:`logitjudge.rubrics.samples`).

The engine validates (:meth:`QuestionTypeDef.check`), renders (``engine.prompt``), counts views
(``engine.prompt``, ``engine.scheduler``'s token estimate, ``engine.decision``), calibrates
(``engine.core`` sets each plan's ``calibrated``), builds answers (``engine.core``) and converts
them to the wire (``logitjudge.convert``) by reading the record of ``Question.type``, never by
branching on the type's name. Adding a type is one record here plus its ``render`` function and
its name in :data:`~logitjudge.engine.types.QuestionType` (CONTRIBUTING, "Add a question type").

Sources: the three wire types and their limits are the API contract (``shared/spec/api.md``
A.5/A.6); the answer fields' formulas are :mod:`logitjudge.engine.answers` (spec A.7).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from logitjudge.engine import answers as answer_fields
from logitjudge.engine.types import (
    MAX_CHOICE_OPTIONS,
    MAX_SCORE_LEVELS,
    Label,
    Question,
    View,
    render_text,
)
from logitjudge.errors import InvalidRequestError, UnsupportedModelError


class TemplateWords(Protocol):
    """The words of a prompt version that the render functions use
    (:class:`~logitjudge.engine.prompt.Template`)."""

    @property
    def noul_reply(self) -> str: ...

    @property
    def choice_header(self) -> str | None: ...

    @property
    def choice_reply(self) -> str: ...

    @property
    def score_header(self) -> str | None: ...

    @property
    def score_reply(self) -> str: ...


class PromptParts(Protocol):
    """What a render function uses of :class:`~logitjudge.engine.prompt.PromptBuilder`: the
    template's words, the tokenizer's answer labels, and the encoders (stated here so that this
    module does not import the prompt module, which reads these records)."""

    @property
    def template(self) -> TemplateWords: ...

    tokenizer: Any
    noul_labels: tuple[Label, Label]
    score_labels: tuple[Label, ...]
    choice_labels: tuple[Label, ...]
    choice_label_texts: tuple[str, ...]
    tail_ids: list[int]

    def boundary_label(self, text: str) -> Label: ...

    def continuation_label(self, text: str) -> Label: ...

    def encode_user(self, text: str) -> list[int]: ...

    def branch(self, lines: Sequence[str]) -> tuple[int, ...]: ...


Render = Callable[[PromptParts, Question, int], View]
"""``render(builder, question, rotation) -> View``: one view of a question (rotation 0 = the
first displayed order; see :meth:`QuestionTypeDef.display_order`)."""

WireFields = Callable[[Question, Sequence[float]], dict[str, Any]]
"""``wire_fields(question, probabilities) -> fields``: the answer's fields on the wire, computed
from the one final distribution (request order), without ``type`` and ``x_option_mass``."""

ReadGold = Callable[[Mapping[str, Any], Any], "tuple[tuple[float, ...], int] | None"]
"""``read_gold(answer, gold) -> (probabilities, gold index) | None``: from a wire answer of the
type (``{"type": ..., "noul": ...}`` or ``{..., "probabilities": {...}}``) and a labelled row's
gold answer (noul: a bool; choice: an option's name; score: a level's index), the distribution
over the options in a fixed order and the index of the gold option in it; ``None`` when the
answer or the gold does not fit the type."""


@dataclass(frozen=True)
class QuestionTypeDef:
    """What one question type is (see the module docstring for who reads which field).

    Attributes:
        name: the type's name (``Question.type``, ``Answer.type``, the wire's ``type``).
        min_options, max_options: how many options a question of this type has (inclusive).
        render: writes one view (:data:`Render`).
        option_names: the options' fixed names in order, or ``None`` (the request names them).
        rotates: option-order rotations apply (``Question.rotations`` views, capped at the
            option count); ``False``: one view whatever ``rotations`` says.
        order_free: the options are a set, not ordered levels: a rotated question is first put
            in a canonical order, so that every ordering of a menu gets the same views.
        likelihood: the readout is the log-likelihood of the one option's text (teacher-forced
            after the question), not a distribution over labels; takes no rotations and no
            calibration, and only this engine's prompt renders it.
        calibrated: an engine calibration may scale this type's answers.
        wire_fields: the answer's fields on the ``POST /v1/systemone`` wire, or ``None``.
        read_gold: ``(wire answer, gold answer) -> (distribution, gold index)``, or ``None``
            (:data:`ReadGold`).
    """

    name: str
    min_options: int
    max_options: int
    render: Render
    option_names: tuple[str, ...] | None = None
    rotates: bool = False
    order_free: bool = False
    likelihood: bool = False
    calibrated: bool = True
    wire_fields: WireFields | None = None
    read_gold: ReadGold | None = None

    def check(self, question: Question, i: int) -> None:
        """Validate a question of this type (``i``: its index in the request, for the message).

        Raises:
            InvalidRequestError: an option count out of range, a name given to two options (their
                probabilities would share one key on the wire), or (likelihood) a blank text or
                rotations; the error's field is ``questions[i].criteria``.
        """
        n = len(question.options)
        where = ("questions", i, "criteria")
        if self.likelihood:
            text = question.options[0].name if n == 1 else None
            if not isinstance(text, str) or not text.strip():
                raise InvalidRequestError(
                    f"questions[{i}]: a {self.name} has exactly 1 option, the non-blank text to score", field=where
                )
            if question.rotations != 1:
                raise InvalidRequestError(f"questions[{i}]: a {self.name} has no rotations", field=where)
        elif self.min_options == self.max_options:
            if n != self.min_options:
                raise InvalidRequestError(
                    f"questions[{i}]: a {self.name} has exactly {self.min_options} outcomes, got {n}", field=where
                )
        elif not self.min_options <= n <= self.max_options:
            noun = "levels" if not self.order_free else "options"
            raise InvalidRequestError(
                f"questions[{i}].criteria: a {self.name} needs {self.min_options}..{self.max_options} {noun}, got {n}",
                field=where,
            )
        names = [render_text(o.name) for o in question.options]
        if len(set(names)) != n:
            repeated = sorted({x for x in names if names.count(x) > 1})
            raise InvalidRequestError(
                f"questions[{i}].criteria: option names must be distinct; repeated: {repeated}", field=where
            )

    def n_views(self, question: Question) -> int:
        """How many views the question is asked in: ``rotations`` capped at the option count
        for a type that rotates, else 1."""
        return max(1, min(question.rotations, len(question.options))) if self.rotates else 1

    def display_order(self, question: Question, rotation: int = 0) -> tuple[int, ...]:
        """The options' displayed order of one view: ``order[position] = option index``.

        An order-free question asked in more than one rotation is first put in a canonical order
        (sorted by its rendered description, then its name), and rotation ``r`` starts that order
        at its ``r``-th option. The views then depend on the set of options, not on the order the
        request gave them in: every ordering of a menu gets the same branches and so the same
        answer (rotations average the position prior; the canonical order removes the request's
        order). A question asked once, and every ordered type (a score's levels), keeps the
        request's order, rotated by ``rotation``.

        Returns:
            A permutation of ``range(len(question.options))``, length n.
        """
        n = len(question.options)
        base: Sequence[int] = range(n)
        if self.order_free and question.rotations > 1:
            base = sorted(
                range(n),
                key=lambda k: (render_text(question.options[k].description), render_text(question.options[k].name)),
            )
        return tuple(base[(k + rotation) % n] for k in range(n))


DEFAULT_NOUL_INSTRUCTIONS = "Decide whether the statement below holds for the state."
"""A noul's question line when its instructions are empty."""

# -- labels ---------------------------------------------------------------------------------

_LETTER_LABEL = re.compile(r"[A-Z]{1,2}(?:[.):\]]|$)")


def label_clash(kind: str, texts: list[str]) -> bool:
    """True when an option's own text could be read as one of the ``kind`` labels beside it.

    ``"digits"`` (score labels 0..9) clash with any text that starts with a digit; ``"letters"``
    (choice labels A..) with any text that is, or starts with, one or two capitals followed by
    ``.``, ``)``, ``:`` or ``]`` (``"A"``, ``"B)"``, ``"AB"``). Numbers inside a text never clash.
    """
    stripped = [t.strip() for t in texts]
    if kind == "digits":
        return any(t[:1].isdigit() for t in stripped)
    return any(_LETTER_LABEL.match(t) for t in stripped)


def _letter_labels(pb: PromptParts, texts: list[str]) -> tuple[tuple[str, ...], tuple[Label, ...]]:
    """Letters A.. for ``len(texts)`` options, or fixed-width numbers (``01``..) when an option's
    text reads like a letter label or the tokenizer has too few single-token letter labels."""
    n = len(texts)
    if n <= len(pb.choice_labels) and not label_clash("letters", texts):
        return pb.choice_label_texts[:n], pb.choice_labels[:n]
    width = len(str(n))
    labels_text = tuple(str(i + 1).zfill(width) for i in range(n))
    labels = tuple(pb.boundary_label(t) for t in labels_text)
    if len(set(labels)) != n:
        raise UnsupportedModelError(f"the tokenizer cannot give {n} distinct answer labels")
    return labels_text, labels


def _noun(label: str) -> str:
    return "letter" if label.isalpha() else "number"


# -- one render function per type ------------------------------------------------------------


def render_noul(pb: PromptParts, question: Question, rotation: int = 0) -> View:
    """The question line, the true and false criteria as "Answer Yes if" lines, the reply cue;
    labels: the model's Yes/No words (the builder's ``noul_labels``)."""
    yes, no = pb.noul_labels
    yes_t, no_t = pb.tokenizer.decode(list(yes)).strip(), pb.tokenizer.decode(list(no)).strip()
    true, false = question.options[0].description, question.options[1].description
    lines = [f"Question: {render_text(question.instructions) or DEFAULT_NOUL_INSTRUCTIONS}"]
    if true is not None:
        lines.append(f"Answer {yes_t} if: {render_text(true)}")
    if false is not None:
        lines.append(f"Answer {no_t} if: {render_text(false)}")
    lines.append(pb.template.noul_reply.format(yes=yes_t, no=no_t))
    return View(pb.branch(lines), (yes, no), (0, 1))


def render_choice(pb: PromptParts, question: Question, rotation: int = 0) -> View:
    """The question line, one ``{label}. {name}: {description}`` line per displayed option, the
    reply cue; the labels follow the displayed position."""
    t = pb.template
    order = CHOICE.display_order(question, rotation)
    texts, labels = _letter_labels(pb, [render_text(o.name) for o in question.options])
    instr = "Which option fits the state best?" if question.instructions is None else render_text(question.instructions)
    lines = [f"Question: {instr}"]
    if t.choice_header is not None:
        lines.append(t.choice_header)
    for pos, k in enumerate(order):
        opt = question.options[k]
        desc = "" if opt.description is None else f": {render_text(opt.description)}"
        lines.append(f"{texts[pos]}. {opt.name}{desc}")
    lines.append(t.choice_reply.format(noun=_noun(texts[0])))
    return View(pb.branch(lines), labels, order)


def render_score(pb: PromptParts, question: Question, rotation: int = 0) -> View:
    """The question line, one ``{label}. {level}`` line per level (listed in the view's order),
    the reply cue; the label stays with its level (digits 0..n-1, or letters when a level's own
    text starts with a digit)."""
    t = pb.template
    n = len(question.options)
    order = SCORE.display_order(question, rotation)
    level_texts = [render_text(o.description) for o in question.options]
    if not label_clash("digits", level_texts):
        texts, labels = tuple(str(i) for i in range(n)), pb.score_labels[:n]
    else:
        texts, labels = pb.choice_label_texts[:n], pb.choice_labels[:n]
    instr = "Which level fits the state best?" if question.instructions is None else render_text(question.instructions)
    lines = [f"Question: {instr}"]
    if t.score_header is not None:
        lines.append(t.score_header.format(lo=texts[0], hi=texts[n - 1]))
    for k in order:
        lines.append(f"{texts[k]}. {level_texts[k]}")
    lines.append(t.score_reply.format(noun=_noun(texts[0]), lo=texts[0], hi=texts[n - 1]))
    return View(pb.branch(lines), labels, tuple(range(n)))


def render_continuation(pb: PromptParts, question: Question, rotation: int = 0) -> View:
    """The instructions as the user turn and the option's text as the assistant's reply: the
    one label is the whole text, teacher-forced token by token."""
    branch = (*pb.encode_user(render_text(question.instructions)), *pb.tail_ids)
    return View(tuple(branch), (pb.continuation_label(render_text(question.options[0].name)),), (0,))


# -- wire answer fields ---------------------------------------------------------------------


def _noul_fields(question: Question, probs: Sequence[float]) -> dict[str, Any]:
    return {"noul": probs[0]}


def _choice_fields(question: Question, probs: Sequence[float]) -> dict[str, Any]:
    names = [o.name for o in question.options]
    return {
        "choice": names[answer_fields.argmax(probs)],
        "probabilities": dict(zip(names, probs)),
        "confidence": answer_fields.choice_confidence(probs),
    }


def _score_fields(question: Question, probs: Sequence[float]) -> dict[str, Any]:
    return {
        "score": answer_fields.expected_score(probs),
        "legend": {o.name: o.description for o in question.options},
        "probabilities": {o.name: p for o, p in zip(question.options, probs)},
        "confidence": answer_fields.score_confidence(probs),
    }


# -- labelled answers: wire answer + gold -> (distribution, gold index) -------------------------


def _noul_gold(answer: Mapping[str, Any], gold: Any) -> tuple[tuple[float, ...], int] | None:
    if not isinstance(gold, bool) or answer.get("noul") is None:
        return None
    return answer_fields.noul_distribution(float(answer["noul"])), 0 if gold else 1


def _choice_gold(answer: Mapping[str, Any], gold: Any) -> tuple[tuple[float, ...], int] | None:
    probs = answer.get("probabilities")
    if not isinstance(probs, Mapping) or str(gold) not in probs:
        return None
    names = list(probs)
    return tuple(float(probs[k]) for k in names), names.index(str(gold))


def _score_gold(answer: Mapping[str, Any], gold: Any) -> tuple[tuple[float, ...], int] | None:
    probs = answer.get("probabilities")
    if not isinstance(probs, Mapping) or not isinstance(gold, int) or isinstance(gold, bool):
        return None
    levels = sorted(probs, key=int)  # the wire's level names are 0..L-1
    return (tuple(float(probs[k]) for k in levels), gold) if 0 <= gold < len(levels) else None


# -- the records ------------------------------------------------------------------------------

NOUL = QuestionTypeDef(
    "noul", 2, 2, render_noul, option_names=("true", "false"), wire_fields=_noul_fields, read_gold=_noul_gold
)
"""Yes/no: the probability of ``true`` (spec A.6.2)."""
CHOICE = QuestionTypeDef(
    "choice",
    2,
    MAX_CHOICE_OPTIONS,
    render_choice,
    rotates=True,
    order_free=True,
    wire_fields=_choice_fields,
    read_gold=_choice_gold,
)
"""One of 2..255 named options (spec A.6.3)."""
SCORE = QuestionTypeDef(
    "score", 2, MAX_SCORE_LEVELS, render_score, rotates=True, wire_fields=_score_fields, read_gold=_score_gold
)
"""One of 2..10 ordered levels, lowest first (spec A.6.4)."""
CONTINUATION = QuestionTypeDef("continuation", 1, 1, render_continuation, likelihood=True, calibrated=False)
"""The engine's likelihood readout: ``log P(text | state, instructions)`` (rubrics use it)."""

QUESTION_TYPES: dict[str, QuestionTypeDef] = {t.name: t for t in (NOUL, CHOICE, SCORE, CONTINUATION)}
"""Every question type the engine answers, by name."""


def question_type(name: str, i: int | None = None) -> QuestionTypeDef:
    """The record of type ``name``.

    Raises:
        InvalidRequestError: no such type (field ``questions[i].type`` when ``i`` is given).
    """
    spec = QUESTION_TYPES.get(name)
    if spec is None:
        where = "questions" if i is None else f"questions[{i}]"
        field = ("questions",) if i is None else ("questions", i, "type")
        raise InvalidRequestError(f"{where}.type: unknown type {name!r}", field=field)
    return spec
