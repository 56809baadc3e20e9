"""Typed hand-offs of the engine: what goes in, what each stage passes on, what comes out.

The engine takes an :class:`EngineRequest` (a state and an ordered tuple of :class:`Question`)
and returns an :class:`EngineResult` (one :class:`Answer` per question, same order, plus usage).
Nothing here knows HTTP or pydantic; ``logitjudge.judge`` converts the wire format to these.

``Text`` is what the API calls Text: a JSON string, object or array. Objects and arrays are
rendered as canonical JSON by :func:`render_text`; strings go to the model as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Union

Text = Union[str, dict, list]
"""A JSON string, object or array (the API's ``Text``)."""

QuestionType = Literal["noul", "choice", "score", "continuation"]
"""``noul``, ``choice`` and ``score`` are the API's question types. ``continuation`` is the
engine's likelihood readout (not on the ``/v1/systemone`` wire; rubrics use it): the
log-probability of a given text after the question, teacher-forced in the same pass. What each
type is (options, views, readout, wire fields): its record in
:mod:`logitjudge.engine.question_types`."""

Label = tuple[int, ...]
"""The token ids of one answer label, as the model would generate them after the prompt."""


def render_text(text: Text | None) -> str:
    """A Text as the model sees it: strings as they are, objects and arrays as canonical JSON."""
    if text is None:
        return ""
    if isinstance(text, str):
        return text
    return json.dumps(text, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


MAX_CHOICE_OPTIONS = 255
"""Most options of a choice question (the API contract, spec A; the wire models and the engine's
checks both read it here)."""
MAX_SCORE_LEVELS = 10
"""Most levels of a score question (the API contract, spec A)."""


@dataclass(frozen=True)
class Option:
    """One outcome a question can take.

    Attributes:
        name: the option's name as the caller wrote it (choice: the option key; score: the level
            index as a decimal string; noul: ``"true"``/``"false"``). Echoed byte for byte.
        description: what the option means, or ``None`` ("interpret by its name").
    """

    name: str
    description: Text | None = None


@dataclass(frozen=True)
class Question:
    """One typed question about the state.

    Attributes:
        type: ``"noul"`` (yes/no), ``"choice"`` (one of 2..255 options) or ``"score"`` (one of
            2..10 ordered levels, lowest first).
        instructions: what to judge; may be ``None`` (a noul then asks whether its ``true``
            criterion holds).
        options: the outcomes in request order. noul: exactly ``(true, false)``; choice: the
            options; score: the levels lowest first, named ``"0"``..``"n-1"``.
            continuation: exactly one option, whose ``name`` is the text to score.
        rotations: debiasing by option-order rotation (1 = off).
        calibrated: whether the engine's calibration may scale this answer. Rubric questions
            whose evaluator has its own scaling (or none) set ``False``, so a calibration fitted
            on typed questions never reaches them.
        head: the name of a trained head (:mod:`logitjudge.engine.heads`) that reads this
            question's answer from hidden states instead of its label logits; ``None``: the
            label logits. The engine must have that head loaded, for this question's type and
            options, and the question takes no rotations.
        adapter: the name of a branch adapter (:mod:`logitjudge.engine.adapters`) that this
            question's branch runs: its tokens get the adapter's low-rank update, the state and
            every other question do not. The engine must have it loaded; ``None``: base weights.
            An adapted answer is not scaled by the engine's calibration (fitted on the base
            model's readout): its label logits are read as the adapter was trained on them.
    """

    type: QuestionType
    instructions: Text | None
    options: tuple[Option, ...]
    rotations: int = 1
    calibrated: bool = True
    head: str | None = None
    adapter: str | None = None


@dataclass(frozen=True)
class View:
    """One rendering of a question: its branch tokens and one label per displayed option.

    Attributes:
        branch: token ids of the question block and the chat tail (the state prefix excluded).
        labels: per displayed option, the label's token ids.
        option_index: per displayed option, the index of the request option it stands for
            (identity unless the options are rotated for debiasing).
    """

    branch: tuple[int, ...]
    labels: tuple[Label, ...]
    option_index: tuple[int, ...]


@dataclass(frozen=True)
class EngineRequest:
    """A state and the questions to answer about it. Question ids never reach the engine."""

    state: Text
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Answer:
    """The engine's answer to one question: one distribution over the question's options.

    Attributes:
        type: the question's type.
        probabilities: one probability per option, request order, summing to 1 (fp64 values
            from an fp32 softmax over the question's own labels).
        option_mass: the raw probability mass the model put on the labels before renormalising
            (softmax over the whole vocabulary); low values mean the prompt fits the model badly.
        label_probabilities: for a question read by a head, what its label logits alone say
            (the zero-shot answer, same order); ``None`` otherwise.
        log_likelihood, tokens: see below (continuation questions only).
    """

    type: QuestionType
    probabilities: tuple[float, ...]
    option_mass: float
    log_likelihood: float | None = None
    """continuation only: ``log P(text | state, instructions)`` in nats, the sum over the text's
    tokens of ``log p(token | everything before it)`` (fp32 terms, full-vocabulary softmax)."""
    tokens: int | None = None
    """continuation only: the number of tokens of the scored text (for a per-token mean)."""
    label_probabilities: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Usage:
    """Token accounting of one request.

    Attributes:
        input_tokens: tokens actually run through the model for this request (state once plus
            every question branch, label continuations included; a rotated question's shared
            stem once).
        output_tokens: always 0: nothing is generated.
    """

    input_tokens: int
    output_tokens: int = 0


@dataclass(frozen=True)
class EngineResult:
    """Answers in the request's question order, and usage."""

    answers: tuple[Answer, ...]
    usage: Usage
