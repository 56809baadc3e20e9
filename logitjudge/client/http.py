"""One server's HTTP client, with bounded retries: :class:`ServerClient`.

Failures:

- cannot connect at the start (refused, unknown host, TLS): :class:`ServerUnreachableError`;
- a 5xx (529 overloaded included), 429 or 408, or a connection lost during a call that retries:
  retried ``retries`` times with exponential backoff (1 s doubling, at most 30 s, with jitter; a
  ``retry-after-ms`` or ``Retry-After`` header is honoured up to 60 s), then
  :class:`ServerFailedError` (or :class:`ServerUnreachableError`); after a lost connection the
  server's engine is checked again (``engine_keys``) before its answer is used;
- no answer within ``timeout`` seconds: :class:`ServerFailedError` (not retried: the server may
  still be working on it; send less per call or wait longer);
- any other 4xx: :class:`ServerRefusedError`, with the server's message naming the field (a 422
  that names items of a batch sets ``items``; a 413 or a 422 on the number of items sets ``too_large``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import ValidationError

from logitjudge import __version__
from logitjudge.client.errors import (
    ServerFailedError,
    ServerMismatchError,
    ServerRefusedError,
    ServerUnreachableError,
)
from logitjudge.client.wire import (
    ASK_PATH,
    EVALUATE_PATH,
    check_api_key,
    json_object,
    normalize_url,
    retry_after,
    said,
    where,
    why,
)
from logitjudge.contract.systemone import MODEL_ALIASES, SystemOneRequest, SystemOneResponse

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "ServerInfo",
    "ServerClient",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds to wait for one answer: a batch of long items on a CPU server takes minutes."""

CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a connection (at most ``timeout``)."""

DEFAULT_RETRIES = 5
"""Retries of a call the server could not answer (about a minute of backoff in all)."""

RETRY_STATUSES = frozenset({408, 429})
"""Statuses retried besides every 5xx (529 overloaded, 503 draining, 500, 502, 504)."""

BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
RETRY_AFTER_CAP = 60.0
"""Backoff: ``BACKOFF_BASE * 2**attempt`` seconds, at most ``BACKOFF_CAP``, plus up to 25 %
jitter; a server's ``retry-after-ms`` / ``Retry-After`` is taken instead, up to ``RETRY_AFTER_CAP``."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself.

    Attributes:
        url: its base URL.
        engine: the run record's ``engine``: ``GET /healthz``'s ``engine`` (logitjudge's engine
            description: model, fingerprint, prompt version, dtype, calibration, ...), else
            ``{"model": <the first model of GET /v1/models that is not an alias>}``.
        described: whether ``engine`` came from ``/healthz`` (else it names the model at most).
        version: the server's software version, when ``/healthz`` says.
        models: the names ``GET /v1/models`` lists (empty when it has none).
        strict_wire: ``/healthz`` says the server leaves ``x_`` fields out unless asked.
    """

    url: str
    engine: dict[str, Any]
    described: bool
    version: str | None = None
    models: tuple[str, ...] = ()
    strict_wire: bool = False

    def label(self) -> str:
        """A line for a person: the model, its fingerprint (shortened) and the server's version."""
        model = self.engine.get("model") or "a model it does not name"
        parts = [str(model)]
        if isinstance(self.engine.get("fingerprint"), str):
            parts.append(f"fingerprint {self.engine['fingerprint'][:12]}")
        if self.version:
            parts.append(f"logitjudge {self.version}")
        return ", ".join(parts)


class ServerClient:
    """An HTTP client of one logitjudge server (or any server of its routes), with bounded retries.

    Use it as a context manager (or call :meth:`close`); one client may make any number of calls.

    Args:
        url: the server's base URL (see :func:`~logitjudge.client.wire.normalize_url`).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout: seconds to wait for one answer (> 0).
        retries: retries of a call the server could not answer (0 = none).
        engine_keys: the engine fields that must stay the same when a lost connection is regained
            (a restarted server); empty = not checked.
        notify: called with a line for a person before each retry (default: nothing).
        transport, sleep: for tests (an ``httpx.MockTransport``, a sleep that records).

    Raises:
        ValueError: ``url`` is not an http(s) URL, or ``api_key`` cannot be sent (see
            :func:`~logitjudge.client.wire.check_api_key`).
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        engine_keys: Sequence[str] = (),
        notify: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = normalize_url(url)
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.engine_keys = tuple(engine_keys)
        self.notify = notify or (lambda _line: None)
        self.sleep = sleep
        self.info_seen: ServerInfo | None = None
        self._reconnected = False
        headers = {"Accept": "application/json", "User-Agent": f"logitjudge/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {check_api_key(api_key)}"
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT)),
            follow_redirects=False,  # spec A.2 T5: a redirect would turn the POST into a GET
            transport=transport,
        )

    def close(self) -> None:
        """Close the connections (the client cannot be used afterwards)."""
        self._http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one HTTP call, with retries ---------------------------------------------------------------

    def backoff(self, attempt: int, reason: str, asked: float | None = None) -> None:
        """Wait before retry ``attempt + 1`` (0-based ``attempt``), saying why through ``notify``;
        ``asked``: the seconds the server asked for (capped at 60)."""
        if asked is not None:
            delay = min(asked, RETRY_AFTER_CAP)
        else:
            delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt) * (1 + random.random() / 4)
        self.notify(f"{reason}; retrying in {delay:.1f} s ({attempt + 1} of {self.retries})")
        self.sleep(delay)

    def _call(self, method: str, path: str, *, body: Any = None, retry: bool) -> httpx.Response:
        """One request; with ``retry``, a 5xx/429/408 or a lost connection is retried.

        Raises:
            ServerUnreachableError, ServerFailedError, ServerRefusedError: see the module docstring.
        """
        call = f"{method} {self.url}{path}"
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout):
                    raise ServerFailedError(
                        f"{call}: no answer within {self.timeout:g} s (--timeout); the server may be "
                        "busy: try a smaller --batch-size or a larger --timeout"
                    ) from None
                reason = why(exc)
            except httpx.TransportError as exc:
                reason = why(exc)
            else:
                status = response.status_code
                if status >= 500 or status in RETRY_STATUSES:
                    text = said(response).text
                    if last:
                        tries = f" after {attempts} attempts" if attempts > 1 else ""
                        raise ServerFailedError(f"{call}: the server answered {status} ({text}){tries}")
                    self.backoff(attempt, f"the server answered {status} ({text})", retry_after(response))
                    continue
                if status >= 300:
                    raise self._refused(response, call)
                return response
            self._lost(call, reason, attempt, attempts, retry=retry, rows_kept=path == EVALUATE_PATH)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _lost(self, call: str, reason: str, attempt: int, attempts: int, *, retry: bool, rows_kept: bool) -> None:
        """A transport error (nothing answered): raise, or wait before trying again (``rows_kept``:
        an evaluate batch, whose earlier rows are written; the message says so)."""
        if not retry:
            raise ServerUnreachableError(
                f"cannot reach the server at {self.url}: {reason}. Is `logitjudge serve` running there? "
                "(It listens once its model has loaded.)"
            )
        if attempt == attempts - 1:
            raise ServerUnreachableError(
                f"lost the server at {self.url}: {reason}, {attempts} attempts"
                + ("; the rows written so far are kept" if rows_kept else "")
            )
        self._reconnected = True
        self.backoff(attempt, f"{call}: {reason}")

    def _refused(self, response: httpx.Response, call: str) -> ServerRefusedError:
        """The error of a 3xx or 4xx answer (other than 408 and 429)."""
        status = response.status_code
        text = said(response)
        if status < 400:
            target = response.headers.get("location", "another URL")
            return ServerRefusedError(
                f"{call}: the server redirects ({status}) to {target}; give that URL as --server",
                status=status,
            )
        if status in (401, 403):
            return ServerRefusedError(
                f"{call}: the server refused the API key ({status} {text.text}); set LOGITJUDGE_API_KEY "
                "(or --api-key) to a key the server accepts",
                status=status,
            )
        if status == 404 and text.error_type in (None, "not_found"):
            return ServerRefusedError(
                f"{call}: not found (404: {text.text}); is {self.url} an evaluator-API server "
                "such as `logitjudge serve`?",
                status=status,
            )
        items: dict[int, str] = {}
        naming_items = 0  # entries that blame one item of the batch
        too_large = status == 413
        field: tuple[str | int, ...] = ()
        for entry in text.entries:
            loc = list(entry.get("loc") or ())
            loc = loc[1:] if loc[:1] == ["body"] else loc
            if not field:
                field = tuple(p for p in loc if isinstance(p, (str, int)))
            if len(loc) >= 2 and loc[0] == "items" and isinstance(loc[1], int):
                msg = f"{where(loc[2:]) if len(loc) > 2 else 'item'}: {entry.get('msg', 'invalid')}"
                items[loc[1]] = f"{items[loc[1]]}; {msg}" if loc[1] in items else msg
                naming_items += 1
            elif loc == ["items"] and entry.get("type") == "too_long":
                too_large = True
        if naming_items < len(text.entries):  # the batch itself is refused too
            items = {}
        return ServerRefusedError(
            f"{call}: the server refused the request ({status}): {text.text}",
            status=status,
            field=field,
            items=items,
            too_large=too_large,
        )

    def _get_optional(self, path: str) -> dict[str, Any] | None:
        """``GET path`` as a JSON object; None when the server has no such route (404, 405) or
        answers with something else than a JSON object."""
        try:
            response = self._call("GET", path, retry=False)
        except ServerRefusedError as exc:
            if exc.status in (404, 405):
                return None
            raise
        try:
            return json_object(response, f"GET {self.url}{path}")
        except ServerFailedError:
            return None

    # -- the API -----------------------------------------------------------------------------------

    def info(self) -> ServerInfo:
        """Who the server is: ``GET /healthz`` and ``GET /v1/models`` (each optional; the second
        checks the API key). The first answer is kept as :attr:`info_seen`.

        Raises:
            ServerUnreachableError: no connection.
            ServerFailedError: the server answers 5xx (a draining server's ``/healthz``: 503).
            ServerRefusedError: the API key is refused, or another 4xx.
        """
        health = self._get_optional("/healthz")
        listing = self._get_optional("/v1/models")
        models: tuple[str, ...] = ()
        if listing is not None and isinstance(listing.get("models"), list):
            models = tuple(str(m["name"]) for m in listing["models"] if isinstance(m, dict) and "name" in m)
        engine = health.get("engine") if health is not None else None
        if isinstance(engine, dict) and engine.get("model"):
            described = True
        else:
            named = next((m for m in models if m not in MODEL_ALIASES), None)
            engine = {"model": named or (health or {}).get("model")}
            described = False
        version = (health or {}).get("version")
        info = ServerInfo(
            url=self.url,
            engine=dict(engine),
            described=described,
            version=str(version) if version is not None else None,
            models=models,
            strict_wire=(health or {}).get("strict_wire") is True,
        )
        if self.info_seen is None:
            self.info_seen = info
        return info

    def _check_same_engine(self) -> None:
        """After a lost connection was regained: the server must serve the engine it served."""
        before = self.info_seen
        if before is None or not self.engine_keys:
            return
        now = self.info()
        changed = [
            f"{k}: {now.engine.get(k)} now, {before.engine.get(k)} before"
            for k in self.engine_keys
            if now.engine.get(k) != before.engine.get(k)
        ]
        if changed:
            raise ServerMismatchError(
                f"the server at {self.url} came back with another engine ({'; '.join(changed)}); "
                "its answers cannot go in this results file"
            )

    def evaluate_batch(
        self,
        evaluators: Sequence[str],
        items: Sequence[Mapping[str, Any]],
        *,
        model: str,
        thresholds: Mapping[str, float] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """One ``POST /api/v1/evaluate`` of ``items`` (the batch form), with retries.

        Args:
            evaluators: names (``name@version`` for a pinned version) run on every item.
            items: request items (``id``, ``input``, ``output``, ``expected``, ``context``, ...).
            model: the request's ``model``; thresholds: pass thresholds by evaluator name;
            extra: more top-level request fields (e.g. ``{"x_strict_wire": False}``).

        Returns:
            (the model the server names, one item result per item, in order). Each result is a
            JSON object whose ``results`` maps names to objects with a ``status``.

        Raises:
            ServerRefusedError: a 4xx (``items`` and ``too_large`` say whether a part of the batch
                could still pass); ServerFailedError: 5xx after the retries, no answer in time, or
                not an evaluate batch response; ServerUnreachableError; ServerMismatchError: a
                regained connection found another engine.
        """
        body: dict[str, Any] = {"evaluators": list(evaluators), "items": list(items), "model": model}
        if thresholds:
            body["thresholds"] = dict(thresholds)
        body.update(extra or {})
        response = self._call("POST", EVALUATE_PATH, body=body, retry=True)
        call = f"POST {self.url}{EVALUATE_PATH}"
        data = json_object(response, call)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(items):
            got = f"{len(results)} results" if isinstance(results, list) else "no `results` list"
            raise ServerFailedError(f"{call}: not an evaluate batch response ({got} for {len(items)} items)")
        for r in results:
            if not (
                isinstance(r, dict)
                and isinstance(r.get("results"), dict)
                and all(isinstance(v, dict) and isinstance(v.get("status"), str) for v in r["results"].values())
            ):
                raise ServerFailedError(f"{call}: an item result is not an object of evaluator results")
        if self._reconnected:
            self._reconnected = False
            self._check_same_engine()
        served = data.get("model")
        return (served if isinstance(served, str) else None), results

    def ask(self, body: Mapping[str, Any] | SystemOneRequest) -> dict[str, Any]:
        """One ``POST /v1/systemone`` (typed questions about a state), with retries.

        Args:
            body: the request, ``{"model", "state", "questions", "x_rotations"?, "x_strict_wire"?}``
                (the shapes of :class:`~logitjudge.contract.systemone.SystemOneRequest`, or one).

        Returns:
            The response JSON as the server sent it: ``{"model", "answers", "usage"}``, each answer
            a probability (``noul``, 0..1), a ``choice`` with ``probabilities``, or a ``score`` (0..n-1).

        Raises:
            ServerRefusedError: a 4xx (an invalid body: ``field`` names the first field; an unknown
                model: 400); ServerFailedError: 5xx after the retries, no answer in time, or not a
                systemone response; ServerUnreachableError; ServerMismatchError: a regained
                connection found another engine (with ``engine_keys``).
        """
        payload = body.model_dump(mode="json", exclude_none=True) if isinstance(body, SystemOneRequest) else dict(body)
        response = self._call("POST", ASK_PATH, body=payload, retry=True)
        call = f"POST {self.url}{ASK_PATH}"
        data = json_object(response, call)
        try:
            SystemOneResponse.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ServerFailedError(
                f"{call}: not a systemone response ({where(first.get('loc') or ())}: {first.get('msg')})"
            ) from None
        if self._reconnected:
            self._reconnected = False
            self._check_same_engine()
        return data
