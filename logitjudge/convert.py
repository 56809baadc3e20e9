"""Wire <-> engine types: the one converter, for the facade, the rubrics and the server.

- :func:`question_to_engine`: a validated wire question (``logitjudge.contract.systemone``) ->
  :class:`~logitjudge.engine.types.Question`;
- :func:`with_rotations`: the option-order rotations a choice or score question is answered with
  (a noul has no order to rotate, so it keeps 1);
- :func:`wire_to_engine`: a validated ``POST /v1/systemone`` request -> :class:`EngineRequest`;
- :func:`answer_to_wire`: the engine's :class:`Answer` to one question -> the wire answer;
- :func:`check_state`: the checks the wire model makes of a ``state`` (valid Unicode, finite, at
  most 64 levels deep), for states built inside (the rubrics' item states).

Imports the wire models and the engine's types and question-type records; nothing of the facade, the
server or the rubrics.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from logitjudge.contract import systemone as schemas
from logitjudge.engine.question_types import QUESTION_TYPES, question_type
from logitjudge.engine.types import Answer, EngineRequest, Option, Question
from logitjudge.errors import InvalidRequestError, LogitJudgeError

__all__ = ["question_to_engine", "with_rotations", "wire_to_engine", "answer_to_wire", "check_state"]


def question_to_engine(q: schemas.NoulQuestion | schemas.ChoiceQuestion | schemas.ScoreQuestion) -> Question:
    """One validated wire question -> the engine's :class:`Question` (``rotations`` = 1).

    noul: options ``(true, false)`` with the criteria's descriptions; choice: the criteria in
    request order, names byte for byte; score: levels named ``"0"``..``"n-1"``.
    """
    adapter = q.x_adapter
    if isinstance(q, schemas.NoulQuestion):
        crit = q.criteria or schemas.NoulCriteria()
        return Question(
            "noul", q.instructions, (Option("true", crit.true), Option("false", crit.false)), adapter=adapter
        )
    if isinstance(q, schemas.ChoiceQuestion):
        options = tuple(Option(name, desc) for name, desc in q.criteria.items())
        return Question("choice", q.instructions, options, adapter=adapter)
    levels = tuple(Option(str(i), level) for i, level in enumerate(q.criteria))
    return Question("score", q.instructions, levels, adapter=adapter)


def with_rotations(question: Question, rotations: int) -> Question:
    """``question`` answered with ``rotations`` option-order rotations (the types whose record
    rotates: choice and score; a noul or continuation keeps 1, and a question read by a trained
    head keeps its one order: the head reads states, not labels)."""
    spec = QUESTION_TYPES.get(question.type)  # an unknown type is the engine's to refuse
    if spec is None or not spec.rotates or question.rotations == rotations or question.head is not None:
        return question
    return dataclasses.replace(question, rotations=rotations)


def wire_to_engine(req: schemas.SystemOneRequest, *, default_rotations: int = 1) -> EngineRequest:
    """Convert a validated wire request to the engine's typed request (question ids dropped).

    The order of ``EngineRequest.questions`` is the order of ``req.questions``; ids never reach
    the engine. Option names are kept byte for byte. Choice and score questions get
    ``req.x_rotations``, or ``default_rotations`` when the request does not say.
    """
    rotations = req.x_rotations if req.x_rotations is not None else default_rotations
    questions = tuple(with_rotations(question_to_engine(q), rotations) for q in req.questions.values())
    return EngineRequest(state=req.state, questions=questions)


def _finite(x: float) -> float:
    if not math.isfinite(x):  # pragma: no cover - softmax over finite logits is finite
        raise LogitJudgeError("non-finite probability from the engine")
    return float(x)


def answer_to_wire(
    question: Question, answer: Answer
) -> schemas.NoulAnswer | schemas.ChoiceAnswer | schemas.ScoreAnswer:
    """Build the wire answer for one question from the engine's one final distribution.

    noul: ``noul`` = P(true); choice: the argmax option, the probabilities by option name and the
    choice confidence; score: the expected level, the legend, the probabilities by level and the
    score confidence (formulas: :mod:`logitjudge.engine.answers`, spec A.7). The fields are the
    ``wire_fields`` of the question type's record (:mod:`logitjudge.engine.question_types`).

    Raises:
        LogitJudgeError: a type with no wire answer (continuation), or a non-finite probability.
    """
    spec = question_type(question.type)
    if spec.wire_fields is None:
        raise LogitJudgeError(f"a {spec.name} question has no answer on the wire")
    fields = spec.wire_fields(question, [_finite(p) for p in answer.probabilities])
    return _WIRE_ANSWER.validate_python({"type": spec.name, **fields, "x_option_mass": _finite(answer.option_mass)})


_WIRE_ANSWER: TypeAdapter[schemas.NoulAnswer | schemas.ChoiceAnswer | schemas.ScoreAnswer] = TypeAdapter(schemas.Answer)


class _State(BaseModel):
    state: schemas.Text


def check_state(state: Any) -> None:
    """The wire model's checks of ``state``, for a state built inside (not parsed from a body).

    Raises:
        InvalidRequestError: a lone surrogate, a non-finite number or nesting over 64 levels;
            ``field`` = ``("state", ...)`` as ``POST /v1/systemone`` would name it.
    """
    try:
        _State.model_validate({"state": state})
    except ValidationError as exc:
        raise InvalidRequestError.from_validation(exc.errors(include_url=False)) from None
