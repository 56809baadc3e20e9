"""The server edge of the exception tree: one table from errors to HTTP statuses and bodies.

Every error response is JSON with one of the two shapes of ``spec/api.md`` A.9:

- validation failures: **422** ``{"detail": [{"loc": ["body", ...], "msg", "type"}, ...]}``
  (FastAPI's shape; ``input`` is never echoed, so a huge or non-finite body cannot come back);
- everything else: ``{"detail": {"error_type": str, "message": str}}``.

A body that cannot be read as JSON at all, for any reason (not JSON, not UTF-8 - RFC 8259 8.1,
nested deeper than the parser's recursion limit, an integer of more than 4,300 digits, a zstd
body that is not zstd), is one case with one shape, on every route::

    422 {"detail": [{"loc": ["body"], "msg": "JSON decode error: <why>", "type": "json_invalid",
                     "ctx": {"error": "<why>"}}]}

(a syntax error keeps FastAPI's ``loc ["body", <char pos>]``). FastAPI itself answers the
non-syntax cases with a bare 400 "There was an error parsing the body"; :func:`_on_http_error`
turns that into the 422 above (see :func:`body_parse_error`).

==============================  ======  ======================  ==========================================
error                           status  error_type              when
==============================  ======  ======================  ==========================================
AuthenticationError             401     authentication_error    missing or wrong API key (middleware)
BodyTooLargeError               413     request_too_large       body over the byte limit (middleware)
UnsupportedMediaTypeError       415     unsupported_media_type  a Content-Encoding other than zstd
UnreadableBodyError             422     (detail[]) json_invalid not JSON / UTF-8, too deep, bad zstd
ContextOverflowError            413     request_too_large       over the token budget (A.10)
UnknownModelError               400     api_usage_error         ``model`` is not served here
UnsupportedInputError           400     api_usage_error         image assets (text-only engine, A.2 T11)
UnsupportedModelError           400     unsupported_model       the model cannot serve this request
UnknownEvaluatorError           422     (detail[]) value_error  an unknown evaluator or suite (B.9)
MissingFieldError               422     (detail[]) missing      an evaluator named explicitly lacks a field
InvalidRequestError             422     (detail[])              the engine or a limit refuses a field
RequestError (other)            400     invalid_request_error
OverloadedError                 529     overloaded_error        queue full / OOM / draining (A.9 E6)
ConfigurationError              500     configuration_error     a bad device, dtype or backend (load time)
EngineDeadError, EngineError    500     internal_error          the engine failed a valid request
LogitJudgeError (other)         500     internal_error
RequestValidationError          422     (detail[])              the body does not match the wire
ClientDisconnected              499     (no body)               the client left before its answer
HTTP 404 / 405 (Starlette)      404/405 not_found / ...         no such route / method
any other exception             500     internal_error          a bug; details only in the log
==============================  ======  ======================  ==========================================

:data:`STATUS_TABLE` is that table (most specific first) and :func:`status_for` reads it; every
response of the server that is not a plain 200 gets its status here, the middlewares' refusals
too (they build an error of the tree and render it with :func:`logitjudge_error_response`).
:data:`LOAD_TIME_ONLY` names the errors raised only while loading a model, never on a request.

A 5xx is only ever the server's own fault: bad input always maps to a 4xx. Overload is 529
``overloaded_error`` (spec A.9 E6; the SDKs and jevcompat retry it) with ``Retry-After`` (whole
seconds) and ``retry-after-ms``; there is no per-client rate limit, so never a 429. ``GET
/healthz`` alone answers :data:`DRAINING_STATUS` (503) while draining: it is a probe for load
balancers, not the API.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from logitjudge.contract.systemone import ErrorBody, ErrorDetail
from logitjudge.errors import (
    AdapterError,
    CalibrationMismatchError,
    ConfigurationError,
    ContextOverflowError,
    EngineDeadError,
    EngineError,
    HeadMismatchError,
    InvalidRequestError,
    LogitJudgeError,
    OverloadedError,
    RequestError,
    UnknownModelError,
    UnsupportedInputError,
    UnsupportedModelError,
)
from logitjudge.rubrics.registry import UnknownEvaluatorError
from logitjudge.rubrics.runner import MissingFieldError

__all__ = [
    "AuthenticationError",
    "BodyTooLargeError",
    "UnsupportedMediaTypeError",
    "UnreadableBodyError",
    "ClientDisconnected",
    "STATUS_TABLE",
    "LOAD_TIME_ONLY",
    "DRAINING_STATUS",
    "ERROR_RESPONSES",
    "status_for",
    "error_response",
    "logitjudge_error_response",
    "validation_response",
    "body_parse_error",
    "unreadable_body_response",
    "install_error_handlers",
]

logger = logging.getLogger("logitjudge.server")


# -- the refusals of the HTTP edge (middlewares), as errors of the tree ------------------------


class AuthenticationError(RequestError):
    """No ``Authorization: Bearer <key>``, or a key that is not configured (-> 401)."""

    error_type = "authentication_error"


class BodyTooLargeError(RequestError):
    """The body (or a declared ``Content-Length``, or a zstd body decoded) is over ``limit`` bytes."""

    error_type = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is over the limit of {limit} bytes")
        self.limit = limit


class UnsupportedMediaTypeError(RequestError):
    """A ``Content-Encoding`` other than ``identity`` and ``zstd``."""

    error_type = "unsupported_media_type"

    def __init__(self, encoding: str) -> None:
        super().__init__(f"Content-Encoding {encoding!r} is not supported (use zstd)")
        self.encoding = encoding


class UnreadableBodyError(InvalidRequestError):
    """The body cannot be read as JSON at all; ``why`` says why (see the module doc)."""

    def __init__(self, why: str) -> None:
        message = f"JSON decode error: {why}"
        super().__init__(message, details=[{"loc": (), "msg": message, "type": "json_invalid", "ctx": {"error": why}}])
        self.why = why


class ClientDisconnected(Exception):
    """The HTTP client closed the connection before its answer was ready (-> 499, no body)."""


STATUS_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (AuthenticationError, 401),
    (BodyTooLargeError, 413),
    (UnsupportedMediaTypeError, 415),
    (UnreadableBodyError, 422),
    (ContextOverflowError, 413),
    (UnknownModelError, 400),
    (UnsupportedInputError, 400),
    (UnsupportedModelError, 400),
    (UnknownEvaluatorError, 422),
    (MissingFieldError, 422),
    (InvalidRequestError, 422),
    (RequestError, 400),
    (OverloadedError, 529),
    (ConfigurationError, 500),
    (EngineDeadError, 500),
    (EngineError, 500),
    (LogitJudgeError, 500),
    (RequestValidationError, 422),
    (ClientDisconnected, 499),
    (Exception, 500),
)
"""Most specific first: the first class an error is an instance of gives its status."""

LOAD_TIME_ONLY: tuple[type[LogitJudgeError], ...] = (CalibrationMismatchError, HeadMismatchError, AdapterError)
"""Errors raised only while loading a model (``Judge.load``), never on a request; the table
gives them their base's status only for completeness."""

DRAINING_STATUS = 503
"""``GET /healthz`` while the server drains (shutdown has begun); 200 otherwise."""

HTTP_ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
"""``error_type`` of the ``HTTPException`` s Starlette raises itself (404, 405, ...), by status."""


_RETRY_HEADERS = {
    "Retry-After": {"description": "whole seconds to wait before retrying", "schema": {"type": "integer"}},
    "retry-after-ms": {"description": "the same wait in milliseconds", "schema": {"type": "integer"}},
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Unknown model (api_usage_error), image assets"},
    401: {"model": ErrorBody, "description": "Missing or wrong API key (authentication_error)"},
    413: {"model": ErrorBody, "description": "Over the token budget or the body size limit (request_too_large)"},
    415: {"model": ErrorBody, "description": "A Content-Encoding other than zstd (unsupported_media_type)"},
    529: {
        "model": ErrorBody,
        "description": "Overloaded (overloaded_error): the queue is full, memory ran out even after "
        "splitting the batch, or the server is shutting down; retry after Retry-After",
        "headers": _RETRY_HEADERS,
    },
}
"""The OpenAPI ``responses`` of the API routes (422 is FastAPI's own ``HTTPValidationError``)."""


def status_for(exc: BaseException) -> int:
    """The HTTP status of ``exc``: the first row of :data:`STATUS_TABLE` it is an instance of."""
    for cls, status in STATUS_TABLE:
        if isinstance(exc, cls):
            return status
    return 500  # a BaseException that is not an Exception (never reaches a handler)


def _status_of(cls: type[BaseException]) -> int:
    """The status :data:`STATUS_TABLE` gives instances of ``cls``."""
    return next(status for row, status in STATUS_TABLE if issubclass(cls, row))


def _headers_for(exc: LogitJudgeError) -> dict[str, str]:
    """The headers an error's response carries besides the content headers."""
    if isinstance(exc, OverloadedError):
        seconds = max(1, math.ceil(exc.retry_after))
        return {"Retry-After": str(seconds), "retry-after-ms": str(int(exc.retry_after * 1000))}
    if isinstance(exc, AuthenticationError):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, BodyTooLargeError):
        return {"Connection": "close"}  # the rest of the body is not read
    return {}


def _safe_str(value: Any) -> str:
    """A string that JSON-encodes as UTF-8 (lone surrogates escaped), for echoing user text."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _safe_json(value: Any) -> Any:
    """``value`` made JSON-safe: finite numbers, encodable strings, everything else as a string."""
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _safe_str(value)
    if isinstance(value, Mapping):
        return {_safe_str(k): _safe_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe_json(v) for v in value]
    return _safe_str(value)


def error_response(
    status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``{"detail": {"error_type", "message"}}`` with ``status`` (the non-validation shape)."""
    body = ErrorBody(detail=ErrorDetail(error_type=error_type, message=_safe_str(message)))
    return JSONResponse(body.model_dump(), status_code=status, headers=dict(headers or {}))


def validation_response(
    errors: Sequence[Mapping[str, Any]], status: int = _status_of(RequestValidationError)
) -> JSONResponse:
    """FastAPI's ``detail[]`` shape (422): ``loc`` (starting with ``"body"``), ``msg``, ``type``
    and ``ctx`` when present. ``input`` is dropped: it may be huge, or hold NaN or lone surrogates."""
    detail = []
    for err in errors:
        loc = [p if isinstance(p, int) else _safe_str(p) for p in err.get("loc", ())]
        if not loc or loc[0] != "body":
            loc = ["body", *loc]
        item: dict[str, Any] = {
            "loc": loc,
            "msg": _safe_str(err.get("msg", "invalid")),
            "type": _safe_str(err.get("type", "value_error")),
        }
        if err.get("ctx"):
            item["ctx"] = _safe_json(err["ctx"])
        detail.append(item)
    return JSONResponse({"detail": detail}, status_code=status)


def unreadable_body_response(why: str) -> JSONResponse:
    """422 ``json_invalid`` at ``loc ["body"]``: the body cannot be read as JSON (see the module doc)."""
    return logitjudge_error_response(UnreadableBodyError(why))


def body_parse_error(exc: StarletteHTTPException) -> str | None:
    """Why the body could not be parsed, when ``exc`` is FastAPI's body-parsing failure; else None.

    FastAPI turns ``json.JSONDecodeError`` into a 422 itself, but any other exception raised while
    parsing the body (``UnicodeDecodeError``, ``RecursionError``, the integer-digits ``ValueError``,
    ...) becomes ``HTTPException(400)`` raised *from* it. That cause is what identifies the case
    (not the message text, which FastAPI may change); nothing of ours raises a 400 ``HTTPException``.
    """
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None or isinstance(cause, StarletteHTTPException):
        return None
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid UTF-8 ({cause.reason} at byte {cause.start}); JSON must be UTF-8"
    if isinstance(cause, RecursionError):
        return "the body is nested too deeply to parse"
    if isinstance(cause, ValueError) and str(cause):
        return str(cause).split(";")[0]  # drop Python's "use sys.set_int_max_str_digits()" hint
    return f"the body could not be parsed ({type(cause).__name__})"


def logitjudge_error_response(exc: LogitJudgeError) -> JSONResponse:
    """The response for any error of our tree: its status from :data:`STATUS_TABLE`; the
    ``detail[]`` shape for an :class:`InvalidRequestError` (its :meth:`~LogitJudgeError.entries`),
    else ``{"detail": {"error_type", "message"}}`` with the headers the error calls for."""
    status = status_for(exc)
    if isinstance(exc, InvalidRequestError):
        return validation_response(exc.entries(), status)
    if status >= 500 and not isinstance(exc, OverloadedError):
        logger.error("engine error: %s", exc.message, exc_info=exc)
    return error_response(status, exc.error_type, exc.message, _headers_for(exc))


async def _on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_response(exc.errors())  # loc already starts with "body"


async def _on_logitjudge_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LogitJudgeError)
    return logitjudge_error_response(exc)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    why = body_parse_error(exc)
    if why is not None:
        return unreadable_body_response(why)
    status = exc.status_code
    error_type = HTTP_ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "internal_error")
    if status == 404:
        message = f"No route {request.url.path}"
    elif status == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    elif isinstance(exc.detail, str):
        message = exc.detail
    else:
        message = json.dumps(_safe_json(exc.detail))
    return error_response(status, error_type, message, exc.headers)


async def _on_client_disconnected(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ClientDisconnected)
    return Response(status_code=status_for(exc))  # nobody reads it; the metrics count it


async def _on_unhandled(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return error_response(status_for(exc), "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Register the table above on ``app`` (replacing FastAPI's defaults)."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(LogitJudgeError, _on_logitjudge_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(ClientDisconnected, _on_client_disconnected)
    app.add_exception_handler(Exception, _on_unhandled)
