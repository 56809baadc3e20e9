"""The one exception tree of logitjudge.

Every error the engine, the rubrics or the Python API raise is a :class:`LogitJudgeError`.
HTTP status codes are assigned only at the server edge (``logitjudge.server.errors``), from
this tree; nothing here knows HTTP.

::

    LogitJudgeError
    ├── RequestError                  the caller's fault: fix the request, do not retry
    │   ├── InvalidRequestError       a field is malformed or out of range (-> 422)
    │   ├── ContextOverflowError      a part is over the token budget (-> 413)
    │   ├── UnknownModelError         the request names a model this engine does not serve (-> 400)
    │   └── UnsupportedModelError     the model cannot serve this engine (bad tokenizer, ...) (load time)
    │       └── CalibrationMismatchError  a calibration file fitted for another model/prompt/dtype/strategy
    └── EngineError                   not the caller's fault
        ├── OverloadedError           queue full, out of memory, draining; retryable (-> 529 + Retry-After)
        └── EngineDeadError           the engine cannot answer at all; not retryable (-> 500)

Every error carries ``field`` (a path into the request, e.g. ``("questions", "q1", "criteria")``)
where one part of the request is to blame, so an error always names the field.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "LogitJudgeError",
    "RequestError",
    "InvalidRequestError",
    "ContextOverflowError",
    "UnknownModelError",
    "UnsupportedModelError",
    "CalibrationMismatchError",
    "EngineError",
    "OverloadedError",
    "EngineDeadError",
]


class LogitJudgeError(Exception):
    """Base of every logitjudge error.

    Args:
        message: a sentence for a person, naming the field and the limit where there is one.
        field: path of the request field to blame, outermost first; empty when none is.
    """

    error_type: str = "internal_error"

    def __init__(self, message: str, *, field: Sequence[str | int] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.field: tuple[str | int, ...] = tuple(field)


class RequestError(LogitJudgeError):
    """The request cannot be answered as sent; retrying it unchanged fails the same way."""

    error_type = "invalid_request_error"


class InvalidRequestError(RequestError):
    """A field is malformed or outside its documented range (e.g. 256 options, 11 levels)."""

    error_type = "invalid_request_error"


class ContextOverflowError(RequestError):
    """A part of the request is over the token budget; nothing is ever truncated.

    Attributes:
        part: which part overflowed, e.g. ``"state + longest question"`` or ``"request total"``.
        tokens: its token count under this model's tokenizer.
        limit: the budget it exceeded, in tokens.
    """

    error_type = "request_too_large"

    def __init__(
        self, message: str, *, part: str, tokens: int, limit: int, field: Sequence[str | int] = ()
    ) -> None:
        super().__init__(message, field=field)
        self.part = part
        self.tokens = tokens
        self.limit = limit


class UnknownModelError(RequestError):
    """The request's ``model`` is neither the served model nor one of its aliases."""

    error_type = "api_usage_error"


class UnsupportedModelError(RequestError):
    """The model cannot be served (e.g. its tokenizer cannot supply distinct answer labels)."""

    error_type = "unsupported_model"


class CalibrationMismatchError(UnsupportedModelError):
    """A calibration file cannot be applied: unreadable, or fitted for another model fingerprint,
    prompt template version, dtype or strategy (``mismatch`` names each differing key)."""

    error_type = "unsupported_model"

    def __init__(self, message: str, *, mismatch: dict[str, tuple[object, object]] | None = None) -> None:
        super().__init__(message)
        self.mismatch = mismatch or {}


class EngineError(LogitJudgeError):
    """The engine failed on a valid request."""

    error_type = "internal_error"
    retryable: bool = False


class OverloadedError(EngineError):
    """The engine is busy (queue full, or out of memory after splitting); retry after ``retry_after`` s."""

    error_type = "overloaded_error"
    retryable = True

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineDeadError(EngineError):
    """The engine cannot answer (e.g. the start-up self-check failed); not retryable."""

    error_type = "internal_error"
