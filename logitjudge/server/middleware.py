"""ASGI middlewares of the server: metrics, API-key auth, and request bodies (size cap, zstd).

Pure ASGI (no ``BaseHTTPMiddleware``), so the endpoint still sees the client's disconnect through
``receive`` after the body, and a freed queue place follows a closed connection at once.

Order, outermost first: :class:`MetricsMiddleware` (counts every response, 401s included), then
:class:`BearerAuthMiddleware` (before any body is read, so an unauthenticated client cannot make
the server buffer a large body), then :class:`BodyMiddleware`.

A middleware refuses a request by building an error of the tree (``AuthenticationError``,
``BodyTooLargeError``, ...) and sending :func:`~logitjudge.server.errors.logitjudge_error_response`
of it (:func:`_refuse`), so its status and body come from the one table in ``errors.py``.
"""

from __future__ import annotations

import hmac
import io
import re
import time
from collections.abc import Iterable

import numpy as np
import zstandard
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from logitjudge.errors import LogitJudgeError, UnsupportedInputError
from logitjudge.server.errors import (
    AuthenticationError,
    BodyTooLargeError,
    UnreadableBodyError,
    UnsupportedMediaTypeError,
    logitjudge_error_response,
)
from logitjudge.server.metrics import ServerMetrics

__all__ = [
    "MetricsMiddleware",
    "BearerAuthMiddleware",
    "BodyMiddleware",
    "OPEN_PATHS",
    "DOCS_ASSETS",
    "is_open_path",
]

DOCS_ASSETS = "/docs/assets"
"""Where the app serves the documentation pages' scripts, styles and favicon (``fastapi-offline``)."""

OPEN_PATHS = frozenset({"/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
"""Paths answered without an API key: probes, metrics and the API documentation (and every path
under :data:`DOCS_ASSETS`)."""


def is_open_path(path: str) -> bool:
    """Whether ``path`` is answered without an API key (:data:`OPEN_PATHS` and the docs' assets)."""
    return path in OPEN_PATHS or path.startswith(DOCS_ASSETS + "/")


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def _refuse(exc: LogitJudgeError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer the request with the response of ``exc`` (status, body and headers from the table)."""
    await logitjudge_error_response(exc)(scope, receive, send)


def _not_utf8_json(body: bytearray) -> str | None:
    """Why ``body`` cannot be UTF-8 JSON text, or ``None``. A NUL byte never is (controls are
    escaped in JSON) and is how UTF-16/32 without a byte-order mark look; one pass each, no copy."""
    nul = body.find(0)
    if nul >= 0:
        return f"the body is not valid UTF-8 JSON (a NUL byte at byte {nul}: UTF-16 or UTF-32?)"
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    return None


MAX_JSON_DEPTH = 256
"""Deepest nesting of arrays and objects a body may have. Python's parser stops at its recursion
limit (about 1,000 levels), but a library may raise that limit for the whole process (torch's
inductor sets at least 2,000 when it compiles), which would let a 1,000-deep body through to
validation with another error; this bound holds whatever the limit (structured ``Text`` has its
own, 64)."""

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
"""A JSON string, escapes included (an unterminated one runs to the end): linear, no backtracking."""
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def _too_deep(body: bytearray, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``body`` nests arrays and objects more than ``limit`` deep, or ``None``.

    Brackets inside strings do not count (a string ends at an unescaped quote). Bodies with at
    most ``limit`` opening brackets are not scanned (C-speed counts); the others lose their
    strings (one regex pass) and the running depth of what is left is a numpy cumulative sum.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return None
    steps = _DEPTH_STEP[np.frombuffer(_JSON_STRING.sub(b"", body), dtype=np.uint8)]
    steps = steps[steps != 0]
    if len(steps) and int(np.cumsum(steps, dtype=np.int32).max()) > limit:
        return f"the body is nested more than {limit} levels deep"
    return None


class MetricsMiddleware:
    """Counts requests by route template, method and status, and observes their latency.

    The route label is the matched route's template; a request answered before routing (a 401
    from auth, a 413 from the body cap) is labelled with its path when that is one of
    ``known_paths``, else ``"unmatched"`` (so unknown paths cannot blow up the label set).
    """

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, known_paths: Iterable[str] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = frozenset(known_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if the app raises before starting a response, the server sends a 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or (
                scope["path"] if scope["path"] in self.known_paths else "unmatched"
            )
            self.metrics.observe_request(template, scope["method"], status, time.perf_counter() - started)


class BearerAuthMiddleware:
    """With keys configured, every path outside :data:`OPEN_PATHS` needs ``Authorization: Bearer <key>``.

    Keys are compared with :func:`hmac.compare_digest` against every configured key (no early
    exit), and never logged. Without keys the middleware is a no-op: an ``Authorization`` header
    is accepted and ignored (spec A.3 AU2).
    """

    def __init__(self, app: ASGIApp, keys: Iterable[str]) -> None:
        self.app = app
        self._keys = tuple(k.encode("utf-8") for k in keys if k)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._keys or is_open_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        if not header:
            message = "Must supply an API key: send Authorization: Bearer <key>"
        else:
            scheme, _, token = header.strip().partition(" ")
            if scheme.lower() == "bearer" and self._matches(token.strip().encode("latin-1")):
                await self.app(scope, receive, send)
                return
            message = "Cannot authenticate with the server: the API key is not valid"
        await _refuse(AuthenticationError(message), scope, receive, send)

    def _matches(self, token: bytes) -> bool:
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(token, key)
        return ok


class BodyMiddleware:
    """Reads request bodies under a byte cap and decodes ``Content-Encoding: zstd``.

    - A body (or a declared ``Content-Length``) over ``max_body_bytes`` gets 413
      ``request_too_large``; so does a zstd body that decompresses to more than that.
    - ``zstd`` bodies are decompressed and passed on without the ``Content-Encoding`` header
      (typesafe-sdk 0.7.5 compresses bodies of 1 KiB and more; spec A.2 T10). ``identity`` is
      passed through; any other encoding gets 415; a body that is not zstd gets the 422
      ``json_invalid`` of every unreadable body (``logitjudge.server.errors``); so does a body
      (decoded) that is not UTF-8 (UTF-16/32 included: JSON bodies are UTF-8, RFC 8259 8.1).
    - ``multipart/form-data`` on ``POST /v1/systemone`` (the SDK's image assets, T11) gets 400
      ``api_usage_error``: this is a text-only engine.

    After the body, ``receive`` is the client's own, so the endpoint can see a disconnect.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "zstd", ""):
            await _refuse(UnsupportedMediaTypeError(encoding), scope, receive, send)
            return
        if scope["path"] == "/v1/systemone" and headers.get("content-type", "").lower().startswith("multipart/"):
            await _refuse(UnsupportedInputError(), scope, receive, send)
            return
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(scope, receive, send)
            return

        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nobody to answer
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body_bytes:
                await self._too_large(scope, receive, send)
                return

        if encoding == "zstd":
            decoded = self._decompress(bytes(body))
            if decoded is None:
                await self._too_large(scope, receive, send)
                return
            if isinstance(decoded, str):  # one shape for every unreadable body (errors.py)
                await _refuse(UnreadableBodyError(decoded), scope, receive, send)
                return
            body = bytearray(decoded)
            raw = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-encoding", b"content-length")]
            scope = {**scope, "headers": [*raw, (b"content-length", str(len(body)).encode("ascii"))]}

        # JSON bodies are UTF-8 (RFC 8259 8.1): json.loads(bytes) would also guess UTF-16/32 from
        # a byte-order mark and accept them, whatever the docs say; refuse anything else here.
        why = _not_utf8_json(body) or _too_deep(body)
        if why is not None:
            await _refuse(UnreadableBodyError(why), scope, receive, send)
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _decompress(self, data: bytes) -> bytes | str | None:
        """The decoded body; ``None`` when it is over the cap; a message when it is not zstd."""
        out = bytearray()
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
            while chunk := reader.read(1 << 16):
                out += chunk
                if len(out) > self.max_body_bytes:
                    return None
        except zstandard.ZstdError as exc:
            return f"the body is not valid zstd ({exc})"
        return bytes(out)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _refuse(BodyTooLargeError(self.max_body_bytes), scope, receive, send)
