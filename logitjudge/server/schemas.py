"""The wire: pydantic models of ``POST /v1/systemone`` and ``GET /v1/models``.

Source: ``shared/spec/api.md`` Part A (jevcompat 0.1.1 and typesafe-sdk 0.7.5). Lenient on the
wire (unknown top-level and question fields are ignored, and their names logged), strict on
what the contract defines: 2..255 choice options, 2..10 score levels, noul criteria keys only
``true``/``false``. Validation errors are pydantic's, so FastAPI's 422 ``detail[]`` has the
``loc``/``msg``/``type`` the reference mock sends (A.5.3).

This module imports pydantic only: no torch, no fastapi.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

logger = logging.getLogger("logitjudge.wire")

Text = Union[str, dict[str, Any], list[Any]]
"""A JSON string, object or array (A.5.2)."""

MAX_CHOICE_OPTIONS = 255
MAX_SCORE_LEVELS = 10

QuestionId = Annotated[str, StringConstraints(min_length=1)]


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


class NoulQuestion(_Lenient):
    """A yes/no question: answered with the probability of yes/true."""

    type: Literal["noul"]
    instructions: Text | None = None
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Lenient):
    """One of 2..255 named options; a null description means "interpret by its name"."""

    type: Literal["choice"]
    instructions: Text | None = None
    criteria: Annotated[
        dict[str, Text | None], Field(min_length=2, max_length=MAX_CHOICE_OPTIONS)
    ]


class ScoreQuestion(_Lenient):
    """One of 2..10 ordered levels, lowest first; level i scores i."""

    type: Literal["score"]
    instructions: Text | None = None
    criteria: Annotated[list[Text], Field(min_length=2, max_length=MAX_SCORE_LEVELS)]


Question = Annotated[Union[NoulQuestion, ChoiceQuestion, ScoreQuestion], Field(discriminator="type")]


class SystemOneRequest(_Lenient):
    """Body of ``POST /v1/systemone``.

    ``x_rotations`` (optional extension): option-order rotations for choice/score questions.
    """

    model: str
    state: Text
    questions: Annotated[dict[QuestionId, Question], Field(min_length=1)]
    x_rotations: Annotated[int, Field(ge=1, le=16)] | None = None


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
