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

=============================  ======  ===========================  ==================================
error                          status  error_type                   when
=============================  ======  ===========================  ==================================
RequestValidationError         422     (detail[])                   the body does not match the wire
(body not readable as JSON)    422     (detail[]) json_invalid      not JSON / UTF-8, too deep, bad zstd
InvalidRequestError            422     (detail[])                   the engine refuses a field
ContextOverflowError           413     request_too_large            over the token budget (A.10)
UnknownModelError              400     api_usage_error              ``model`` is not served here
UnsupportedModelError          400     unsupported_model            the model cannot serve this request
RequestError (other)           400     invalid_request_error
OverloadedError                529     overloaded_error             queue full / OOM / draining (A.9 E6)
EngineDeadError, EngineError   500     internal_error               the engine failed a valid request
HTTP 401                       401     authentication_error         missing or wrong API key
HTTP 404 / 405                 404/405 not_found / method_not_allowed
HTTP 413                       413     request_too_large            body over the byte limit
any other exception            500     internal_error               a bug; details only in the log
=============================  ======  ===========================  ==================================

A 5xx is only ever the server's own fault: bad input always maps to a 4xx. Overload is 529
``overloaded_error`` (spec A.9 E6; the SDKs and jevcompat retry it) with ``Retry-After`` (whole
seconds) and ``retry-after-ms``; there is no per-client rate limit, so never a 429. ``GET
/healthz`` alone answers 503 while draining: it is a probe for load balancers, not the API.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from logitjudge.errors import (
    ContextOverflowError,
    EngineDeadError,
    EngineError,
    InvalidRequestError,
    LogitJudgeError,
    OverloadedError,
    RequestError,
    UnknownModelError,
    UnsupportedModelError,
)
from logitjudge.server.schemas import ErrorBody, ErrorDetail

__all__ = [
    "STATUS_TABLE",
    "ERROR_RESPONSES",
    "status_for",
    "error_response",
    "validation_response",
    "body_parse_error",
    "unreadable_body_response",
    "install_error_handlers",
]

logger = logging.getLogger("logitjudge.server")

STATUS_TABLE: tuple[tuple[type[LogitJudgeError], int], ...] = (
    (ContextOverflowError, 413),
    (UnknownModelError, 400),
    (UnsupportedModelError, 400),
    (InvalidRequestError, 422),
    (RequestError, 400),
    (OverloadedError, 529),
    (EngineDeadError, 500),
    (EngineError, 500),
    (LogitJudgeError, 500),
)
"""Most specific first: the first class an error is an instance of gives its status."""

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


def status_for(exc: LogitJudgeError) -> int:
    """The HTTP status of an error of our tree (500 for anything unlisted)."""
    for cls, status in STATUS_TABLE:
        if isinstance(exc, cls):
            return status
    return 500


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


def validation_response(errors: Sequence[Mapping[str, Any]]) -> JSONResponse:
    """422 with FastAPI's ``detail[]``: ``loc`` (starting with ``"body"``), ``msg``, ``type`` and
    ``ctx`` when present. ``input`` is dropped: it may be huge, or hold NaN or lone surrogates."""
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
    return JSONResponse({"detail": detail}, status_code=422)


def unreadable_body_response(why: str) -> JSONResponse:
    """422 ``json_invalid`` at ``loc ["body"]``: the body cannot be read as JSON (see the module doc)."""
    why = _safe_str(why)
    return validation_response(
        [{"loc": ["body"], "msg": f"JSON decode error: {why}", "type": "json_invalid", "ctx": {"error": why}}]
    )


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
    """The response for any error of our tree (see the module's table)."""
    status = status_for(exc)
    if status == 422 and isinstance(exc, InvalidRequestError):
        return validation_response(exc.entries())
    headers: dict[str, str] = {}
    if isinstance(exc, OverloadedError):
        seconds = max(1, math.ceil(exc.retry_after))
        headers = {"Retry-After": str(seconds), "retry-after-ms": str(int(exc.retry_after * 1000))}
    if status >= 500 and not isinstance(exc, OverloadedError):
        logger.error("engine error: %s", exc.message, exc_info=exc)
    return error_response(status, exc.error_type, exc.message, headers)


async def _on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_response(exc.errors())


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


async def _on_unhandled(_request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Register the table above on ``app`` (replacing FastAPI's defaults)."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(LogitJudgeError, _on_logitjudge_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unhandled)
