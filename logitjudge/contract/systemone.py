"""The System One wire: pydantic models of ``POST /v1/systemone`` and ``GET /v1/models``.

Source: ``shared/spec/api.md`` Part A (jevcompat 0.1.1 and typesafe-sdk 0.7.5). Lenient on the
wire (unknown top-level and question fields are ignored, and their names logged), strict on
what the contract defines: 2..255 choice options, 2..10 score levels, noul criteria keys only
``true``/``false``. Validation errors are pydantic's, so FastAPI's 422 ``detail[]`` has the
``loc``/``msg``/``type`` the reference mock sends (A.5.3).

This module imports pydantic only, no torch and no fastapi; of ours, only the contract's two
option limits from ``logitjudge.engine.types`` (a leaf of dataclasses), so they are written once.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from logitjudge.contract.extensions import strict_dump
from logitjudge.engine.types import MAX_CHOICE_OPTIONS, MAX_SCORE_LEVELS

logger = logging.getLogger("logitjudge.wire")

MODEL_ALIASES = ("jev-latest",)
"""Model names every judge answers to besides its own (the SDK's default is ``jev-latest``)."""

MAX_TEXT_DEPTH = 64
"""Deepest nesting of a structured Text (objects/arrays inside objects/arrays) that is accepted."""


def _check_str(value: str) -> str:
    """Refuse strings that cannot be encoded as UTF-8 (lone surrogates such as ``"\\ud800"``).

    JSON allows escaped lone surrogates; they would make the tokenizer or the response encoder
    fail, which must be a 422 on the request, never a 5xx.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("Text must be valid Unicode (no lone surrogate code points)") from None
    return value


def _check_text(value: Any) -> Any:
    """Structured Text must be finite (no NaN/Infinity), valid Unicode and at most 64 levels deep.

    Iterative, so a deeply nested body cannot exhaust the interpreter's stack.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_str(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("numbers must be finite (NaN and Infinity are not JSON)")
        elif isinstance(item, (dict, list)):
            if depth >= MAX_TEXT_DEPTH:
                raise ValueError(f"structured Text is nested more than {MAX_TEXT_DEPTH} levels deep")
            if isinstance(item, dict):
                for key, sub in item.items():
                    _check_str(str(key))
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in item)
    return value


WireStr = Annotated[str, AfterValidator(_check_str)]
"""A string from the wire: any Unicode, kept byte for byte, but never a lone surrogate."""

Text = Annotated[Union[str, dict[str, Any], list[Any]], AfterValidator(_check_text)]
"""A JSON string, object or array (A.5.2); finite, valid Unicode, at most 64 levels deep."""

QuestionId = Annotated[str, StringConstraints(min_length=1), AfterValidator(_check_str)]


class _Lenient(BaseModel):
    """Accepts unknown fields (the contract demands it) and logs their names, never their values."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _log_ignored(self) -> _Lenient:
        if self.model_extra:
            logger.debug("ignored unknown fields of %s: %s", type(self).__name__, sorted(self.model_extra))
        return self


class NoulCriteria(BaseModel):
    """Descriptions of the two outcomes of a noul; either may be absent or null (A.5.2)."""

    model_config = ConfigDict(extra="forbid")

    true: Text | None = None
    false: Text | None = None


class _Question(_Lenient):
    """What every question type may carry besides its own fields."""

    x_adapter: WireStr | None = Field(
        default=None,
        description="extension: the name of a branch adapter loaded on the server (`--adapters`) that "
        "answers this question; the state and the other questions are not affected",
    )


class NoulQuestion(_Question):
    """A yes/no question: answered with the probability of yes/true."""

    type: Literal["noul"]
    instructions: Text | None = None
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Question):
    """One of 2..255 named options; a null description means "interpret by its name"."""

    type: Literal["choice"]
    instructions: Text | None = None
    criteria: Annotated[dict[WireStr, Text | None], Field(min_length=2, max_length=MAX_CHOICE_OPTIONS)]


class ScoreQuestion(_Question):
    """One of 2..10 ordered levels, lowest first; level i scores i."""

    type: Literal["score"]
    instructions: Text | None = None
    criteria: Annotated[list[Text], Field(min_length=2, max_length=MAX_SCORE_LEVELS)]


Question = Annotated[Union[NoulQuestion, ChoiceQuestion, ScoreQuestion], Field(discriminator="type")]


class SystemOneRequest(_Lenient):
    """Body of ``POST /v1/systemone``.

    Optional extensions: ``x_rotations``, option-order rotations for choice/score questions;
    ``x_strict_wire``, ``true`` for an answer without any ``x_`` field (``false``: with them; absent:
    the server's ``--strict-wire`` setting decides).
    """

    model: str
    state: Text
    questions: Annotated[dict[QuestionId, Question], Field(min_length=1)]
    x_rotations: Annotated[int, Field(ge=1, le=16)] | None = None
    x_strict_wire: bool | None = Field(
        default=None,
        description="extension: true = the response carries no `x_` field (for clients that validate "
        "against a closed schema); false = it carries them; absent = the server's setting (`--strict-wire`)",
    )


class NoulAnswer(BaseModel):
    """``{"type":"noul","noul":p}``: no confidence on a noul (A.6.2)."""

    type: Literal["noul"] = "noul"
    noul: float
    x_option_mass: float | None = None


class ChoiceAnswer(BaseModel):
    """``choice`` = argmax, ``probabilities`` keyed by the request's option names (A.6.3)."""

    type: Literal["choice"] = "choice"
    choice: str
    probabilities: dict[str, float]
    confidence: float
    x_option_mass: float | None = None


class ScoreAnswer(BaseModel):
    """``score`` = sum i*p_i over the returned probabilities, keys "0".."n-1" (A.6.4)."""

    type: Literal["score"] = "score"
    score: float
    legend: dict[str, Text]
    probabilities: dict[str, float]
    confidence: float
    x_option_mass: float | None = None


Answer = Annotated[Union[NoulAnswer, ChoiceAnswer, ScoreAnswer], Field(discriminator="type")]


class Usage(BaseModel):
    """Tokens run (state once plus every question branch) and generated (always 0)."""

    input_tokens: int
    output_tokens: int


class SystemOneResponse(BaseModel):
    """Body of a 200 from ``POST /v1/systemone``."""

    model: str
    answers: dict[str, Answer]
    usage: Usage

    def to_wire(self, *, strict: bool = False) -> dict[str, Any]:
        """The JSON body: null fields left out; with ``strict``, every ``x_`` field too
        (:func:`~logitjudge.contract.extensions.strict_dump`)."""
        return strict_dump(self) if strict else self.model_dump(mode="json", exclude_none=True)


class ModelMetadata(BaseModel):
    name: str
    description: str
    release_date: str


class ListModelsResponse(BaseModel):
    """Body of ``GET /v1/models``."""

    models: list[ModelMetadata]


class ErrorDetail(BaseModel):
    error_type: str
    message: str


class ErrorBody(BaseModel):
    """``{"detail": {"error_type", "message"}}``: every non-validation error (A.9 E4)."""

    detail: ErrorDetail
