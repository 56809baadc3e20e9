"""The small pieces of talking HTTP to a server: its base URL, the API key, what an error
response says, how long it asks to wait, and a body read as a JSON object."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from logitjudge.client.errors import ServerFailedError

__all__ = [
    "EVALUATE_PATH",
    "ASK_PATH",
    "normalize_url",
    "check_api_key",
    "Said",
    "said",
    "where",
    "retry_after",
    "why",
    "json_object",
]

EVALUATE_PATH = "/api/v1/evaluate"
"""The evaluator API's route (batch form: ``{"evaluators", "items", "model", "thresholds"}``)."""

ASK_PATH = "/v1/systemone"
"""The question API's route (``{"model", "state", "questions"}``)."""


def normalize_url(text: str) -> str:
    """The base URL of a server: ``http(s)://host[:port][/prefix]`` without a trailing slash (a
    trailing ``/api/v1/evaluate`` is dropped, so the endpoint's own URL works too).

    Raises:
        ValueError: not an http(s) URL with a host (the message says what was expected).
    """
    url = text.strip()
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"--server {text!r}: {exc}; expected http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--server {text!r}: expected an http(s) URL such as http://127.0.0.1:8000")
    if parts.query or parts.fragment:
        raise ValueError(f"--server {text!r}: a base URL has no ?query or #fragment")
    del port
    path = parts.path.rstrip("/")
    if path.endswith(EVALUATE_PATH):
        path = path[: -len(EVALUATE_PATH)]
    return f"{parts.scheme}://{parts.netloc}{path}"


def check_api_key(key: str) -> str:
    """``key`` if it can be sent as a bearer token (printable ASCII, no whitespace).

    Raises:
        ValueError: it cannot (the message never shows the key).
    """
    if not key or any(not (33 <= ord(c) <= 126) for c in key):
        raise ValueError("the API key must be printable ASCII without spaces")
    return key


def where(loc: Sequence[Any]) -> str:
    """A pydantic ``loc`` as a path: ``["body", "items", 3, "context", 0]`` -> ``items[3].context[0]``."""
    parts = list(loc)
    if parts[:1] == ["body"]:
        parts = parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out or "body"


@dataclass(frozen=True)
class Said:
    """What an error response says: one line for a person, its validation entries, its ``error_type``."""

    text: str
    entries: tuple[dict[str, Any], ...] = ()
    error_type: str | None = None


def said(response: httpx.Response) -> Said:
    """The message of an error response, in the shapes of spec A.9 (``detail[]``, ``detail``
    object or string) and the common others (``error``, ``message``); else its text (300
    characters at most)."""
    try:
        body = response.json()
    except ValueError:
        text = " ".join(response.text.split())[:300]
        return Said(text or response.reason_phrase or "no message")
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        entries = tuple(e for e in detail if isinstance(e, dict))
        shown = "; ".join(f"{where(e.get('loc') or ())}: {e.get('msg', 'invalid')}" for e in entries[:3])
        if len(entries) > 3:
            shown += f" (and {len(entries) - 3} more)"
        return Said(shown or "invalid request", entries)
    if isinstance(detail, dict):
        kind = detail.get("error_type")
        message = str(detail.get("message") or kind or detail)
        return Said(f"{kind}: {message}" if kind else message, error_type=kind)
    if isinstance(detail, str):
        return Said(detail)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return Said(str(err["message"]), error_type=err.get("type"))
        if isinstance(err, str):
            return Said(err)
        if isinstance(body.get("message"), str):
            return Said(body["message"], error_type=body.get("error_type"))
    return Said(json.dumps(body, ensure_ascii=False)[:300])


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date); None when it asks nothing."""
    ms = response.headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    after = response.headers.get("retry-after")
    if not after:
        return None
    try:
        return max(0.0, float(after))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(after)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def why(exc: httpx.TransportError) -> str:
    """A transport error in a few words (the OS's reason where it gives one)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    if isinstance(exc, httpx.ConnectTimeout):
        return "the connection timed out"
    return f"the connection failed ({text})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    """The response's body as a JSON object (``NaN`` and ``Infinity`` refused).

    Raises:
        ServerFailedError: it is not one (``what`` names the call in the message).
    """
    try:
        body = json.loads(response.content, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ServerFailedError(f"{what}: the answer is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ServerFailedError(f"{what}: the answer is not a JSON object")
    return body
