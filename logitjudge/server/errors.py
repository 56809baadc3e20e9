"""The server edge of the exception tree: one table from errors to HTTP statuses and bodies.

Every error response is JSON with one of the two shapes of ``spec/api.md`` A.9:

- validation failures: **422** ``{"detail": [{"loc": ["body", ...], "msg", "type"}, ...]}``
  (FastAPI's shape; ``input`` is never echoed, so a huge or non-finite body cannot come back);
- everything else: ``{"detail": {"error_type": str, "message": str}}``.

=============================  ======  ===========================  ==================================
error                          status  error_type                   when
=============================  ======  ===========================  ==================================
RequestValidationError         422     (detail[])                   the body does not match the wire
InvalidRequestError            422     (detail[])                   the engine refuses a field
ContextOverflowError           413     request_too_large            over the token budget (A.10)
UnknownModelError              400     api_usage_error              ``model`` is not served here
UnsupportedModelError          400     unsupported_model            the model cannot serve this request
RequestError (other)           400     invalid_request_error
OverloadedError                503     overloaded_error             queue full / draining; Retry-After
EngineDeadError, EngineError   500     internal_error               the engine failed a valid request
HTTP 401                       401     authentication_error         missing or wrong API key
HTTP 404 / 405                 404/405 not_found / method_not_allowed
HTTP 413                       413     request_too_large            body over the byte limit
any other exception            500     internal_error               a bug; details only in the log
=============================  ======  ===========================  ==================================

A 5xx is only ever the server's own fault: bad input always maps to a 4xx.
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
    "status_for",
    "error_response",
    "validation_response",
    "install_error_handlers",
]

logger = logging.getLogger("logitjudge.server")

STATUS_TABLE: tuple[tuple[type[LogitJudgeError], int], ...] = (
    (ContextOverflowError, 413),
    (UnknownModelError, 400),
    (UnsupportedModelError, 400),
    (InvalidRequestError, 422),
    (RequestError, 400),
    (OverloadedError, 503),
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
}


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


def _invalid_request_errors(exc: InvalidRequestError) -> list[dict[str, Any]]:
    """The ``detail[]`` items of an :class:`InvalidRequestError` (pydantic's, or one from ``field``)."""
    pydantic_errors = getattr(exc, "errors", None)
    if isinstance(pydantic_errors, list) and pydantic_errors:
        return pydantic_errors
    return [{"loc": list(exc.field), "msg": exc.message, "type": "value_error"}]


def logitjudge_error_response(exc: LogitJudgeError) -> JSONResponse:
    """The response for any error of our tree (see the module's table)."""
    status = status_for(exc)
    if status == 422 and isinstance(exc, InvalidRequestError):
        return validation_response(_invalid_request_errors(exc))
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
