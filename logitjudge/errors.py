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
    │   ├── UnsupportedInputError     the request uses an input this engine cannot take (image assets) (-> 400)
    │   └── UnsupportedModelError     the model cannot serve this request or this engine (bad tokenizer, ...) (-> 400)
    │       └── CalibrationMismatchError  a calibration file fitted for another model/prompt/dtype/strategy (load time)
    ├── ConfigurationError            the operator's: an unknown device, dtype, backend, strategy (load time; -> 500)
    └── EngineError                   not the caller's fault
        ├── OverloadedError           queue full, out of memory, draining; retryable (-> 529 + Retry-After)
        └── EngineDeadError           the engine cannot answer at all; not retryable (-> 500)

Elsewhere: the rubrics add ``UnknownEvaluatorError`` and ``MissingFieldError`` (both
InvalidRequestError, -> 422); the server edge adds the refusals of its middlewares
(``AuthenticationError`` 401, ``BodyTooLargeError`` 413, ``UnsupportedMediaTypeError`` 415,
``UnreadableBodyError`` 422; see ``logitjudge.server.errors``, whose table lists every class).

Every error carries typed fields, set by its constructor and never changed afterwards:

- ``message``: a sentence for a person;
- ``field``: a path into the request (e.g. ``("questions", "q1", "criteria")``) where one part of
  the request is to blame, so an error always names the field;
- ``details``: pydantic-style entries (:class:`ErrorEntry`: ``loc``, ``msg``, ``type``, optional
  ``ctx``), one per failed check, for errors answered with the validation shape; empty means
  "one entry made from ``field`` and ``message``" (:meth:`LogitJudgeError.entries`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

__all__ = [
    "ErrorEntry",
    "error_entry",
    "LogitJudgeError",
    "RequestError",
    "InvalidRequestError",
    "ContextOverflowError",
    "UnknownModelError",
    "UnsupportedInputError",
    "UnsupportedModelError",
    "CalibrationMismatchError",
    "AdapterError",
    "ConfigurationError",
    "EngineError",
    "OverloadedError",
    "EngineDeadError",
]


Loc = tuple[str | int, ...]


class _ErrorEntryRequired(TypedDict):
    loc: Loc
    msg: str
    type: str


class ErrorEntry(_ErrorEntryRequired, total=False):
    """One failed check, in pydantic's shape: ``loc`` (a request path without the ``"body"``
    prefix the server adds), ``msg`` (for a person), ``type`` (pydantic's error type, e.g.
    ``"missing"``, ``"too_long"``) and, when the check has parameters, ``ctx``."""

    ctx: dict[str, Any]


def error_entry(raw: Mapping[str, Any], *, prefix: Sequence[str | int] = ()) -> ErrorEntry:
    """An :class:`ErrorEntry` from a pydantic-style mapping (``ValidationError.errors()`` items).

    ``loc`` is put under ``prefix``; ``msg`` and ``type`` default to ``"invalid"`` and
    ``"value_error"``; ``input``, ``url`` and other keys are dropped (an input may be huge).
    """
    entry = ErrorEntry(
        loc=(*prefix, *raw.get("loc", ())),
        msg=str(raw.get("msg", "invalid")),
        type=str(raw.get("type", "value_error")),
    )
    if raw.get("ctx"):
        entry["ctx"] = dict(raw["ctx"])
    return entry


class LogitJudgeError(Exception):
    """Base of every logitjudge error.

    Args:
        message: a sentence for a person, naming the field and the limit where there is one.
        field: path of the request field to blame, outermost first; empty when none is.
        details: pydantic-style entries of the failed checks (see :func:`error_entry`), for
            errors answered with the validation shape; empty when ``field`` and ``message`` say it.
    """

    error_type: str = "internal_error"
    """What the error body's ``error_type`` says (the non-validation shape)."""
    detail_type: str = "value_error"
    """The ``type`` of the entry :meth:`entries` makes from ``field`` when ``details`` is empty."""

    def __init__(
        self,
        message: str,
        *,
        field: Sequence[str | int] = (),
        details: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field: Loc = tuple(field)
        self.details: tuple[ErrorEntry, ...] = tuple(error_entry(d) for d in details)

    def entries(self) -> tuple[ErrorEntry, ...]:
        """``details``, or when there are none one entry at ``field`` saying ``message``
        (of type :attr:`detail_type`)."""
        if self.details:
            return self.details
        return (ErrorEntry(loc=self.field, msg=self.message, type=self.detail_type),)


class RequestError(LogitJudgeError):
    """The request cannot be answered as sent; retrying it unchanged fails the same way."""

    error_type = "invalid_request_error"


class InvalidRequestError(RequestError):
    """A field is malformed or outside its documented range (e.g. 256 options, 11 levels)."""

    error_type = "invalid_request_error"

    @classmethod
    def from_validation(
        cls, errors: Sequence[Mapping[str, Any]], *, prefix: Sequence[str | int] = ()
    ) -> InvalidRequestError:
        """One error for pydantic's ``errors`` (``ValidationError.errors()``, at least one).

        ``message`` and ``field`` are the first error's (``"<loc joined by dots>: <msg>"``);
        ``details`` holds every error; each ``loc`` is put under ``prefix``.
        """
        entries = tuple(error_entry(e, prefix=prefix) for e in errors)
        first = entries[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return cls(f"{where}: {first['msg']}", field=first["loc"], details=entries)


class ContextOverflowError(RequestError):
    """A part of the request is over the token budget; nothing is ever truncated.

    Attributes:
        part: which part overflowed, e.g. ``"state + longest question"`` or ``"request total"``.
        tokens: its token count under this model's tokenizer.
        limit: the budget it exceeded, in tokens.
    """

    error_type = "request_too_large"

    def __init__(self, message: str, *, part: str, tokens: int, limit: int, field: Sequence[str | int] = ()) -> None:
        super().__init__(message, field=field)
        self.part = part
        self.tokens = tokens
        self.limit = limit


class UnknownModelError(RequestError):
    """The request's ``model`` is neither the served model nor one of its aliases.

    Raised only by :meth:`logitjudge.judge.Judge.check_model`, so every API says it the same way.

    Attributes:
        requested: the ``model`` the request named.
        served: the served model's name.
        aliases: the other names it answers to.
    """

    error_type = "api_usage_error"

    def __init__(self, requested: str, *, served: str, aliases: Sequence[str] = ()) -> None:
        also = f" (also as {', '.join(aliases)})" if aliases else ""
        super().__init__(f"Unknown model: {requested!r}; this server serves {served!r}{also}", field=("model",))
        self.requested = requested
        self.served = served
        self.aliases = tuple(aliases)


class UnsupportedInputError(RequestError):
    """The request uses an input this engine cannot take: ``what`` (image assets: it is text-only)."""

    error_type = "api_usage_error"

    def __init__(self, what: str = "image assets", *, field: Sequence[str | int] = ()) -> None:
        super().__init__(f"{what} are not supported by this model (text-only engine)", field=field)
        self.what = what


class UnsupportedModelError(RequestError):
    """The model cannot be served (e.g. its tokenizer cannot supply distinct answer labels)."""

    error_type = "unsupported_model"


class CalibrationMismatchError(UnsupportedModelError):
    """A calibration file cannot be applied: unreadable, or fitted for another model fingerprint,
    prompt template version or dtype (``mismatch`` names each differing key)."""

    error_type = "unsupported_model"

    def __init__(self, message: str, *, mismatch: dict[str, tuple[object, object]] | None = None) -> None:
        super().__init__(message, field=("calibration",))  # the --calibration / Judge.load argument
        self.mismatch = mismatch or {}


class HeadMismatchError(UnsupportedModelError):
    """A decision head cannot be used: unreadable, or trained for another model fingerprint or
    prompt template version (``mismatch`` names each differing key, head value first)."""

    error_type = "unsupported_model"

    def __init__(self, message: str, *, mismatch: dict[str, tuple[object, object]] | None = None) -> None:
        super().__init__(message, field=("heads",))  # the --heads / Judge.load argument
        self.mismatch = mismatch or {}


class AdapterError(UnsupportedModelError):
    """A branch adapter cannot be used: a missing or malformed file, a plain LoRA (it would change
    the state's keys and values), a refused option, weights for another model, or one trained for
    another fingerprint or prompt version. ``field`` names the file and key, e.g.
    ``("adapter_config.json", "alora_invocation_tokens")``."""

    error_type = "unsupported_model"


class ConfigurationError(LogitJudgeError):
    """The engine is configured with something it cannot run: an unknown device, dtype, backend,
    strategy, attention or prompt version, or a combination this model or machine refuses.

    The operator's to fix, never a request's: raised while loading (``EngineConfig``,
    ``Judge.load``, ``Engine.load``), before any request is answered; the CLI exits 2 (a bad flag),
    a server that met one would answer 500. ``field`` names the option (``("backend",)``).
    """

    error_type = "configuration_error"


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
