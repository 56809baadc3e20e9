"""``logitjudge evaluate --server URL``: evaluate through a running server instead of a local model.

::

    logitjudge serve --port 8000 &                     # loads the model once; answers every client
    LOGITJUDGE_API_KEY=KEY logitjudge evaluate DATA.jsonl --evaluators RAG \\
        --server http://127.0.0.1:8000 --out results.jsonl

The rows are planned here exactly as a local run plans them
(:func:`~logitjudge.rubrics.runner.plan_item`, not strict): what needs no model (an evaluator
skipped for a missing field, an invalid typed question) is decided here, and each row sends only
the evaluators that run on it, by name (``name@version`` for a pinned earlier version). Up to
``--batch-size`` consecutive rows that send the same evaluators go in one ``POST
/api/v1/evaluate`` call (the batch form, ``{"evaluators", "items", "model", "thresholds"}``); the
server's item results, with the rows' local results merged in, are the rows written. So a
results file has the same rows, whether a local model or a server of the same engine made them,
and may be resumed either way.

The client needs only the evaluator API (``POST /api/v1/evaluate``, batch form). It also reads,
where the server has them: ``GET /healthz`` (logitjudge's ``engine`` description: model,
fingerprint, prompt version, dtype, calibration; recorded in the run record as a local run
records its engine) and ``GET /v1/models`` (checks the API key before any work; names the model
of a server without ``/healthz``). Every evaluator result must report the version this
catalogue selects, else the run stops (:class:`ServerMismatchError`).

Failures (:class:`EvaluateClient`):

- cannot connect at the start (refused, unknown host, TLS): :class:`ServerUnreachableError`;
- a 5xx (529 overloaded included), 429 or 408, or a connection lost during the run: retried
  ``retries`` times with exponential backoff (1 s doubling, at most 30 s, with jitter; a
  ``retry-after-ms`` or ``Retry-After`` header is honoured up to 60 s), then
  :class:`ServerFailedError` (or :class:`ServerUnreachableError`); after a lost connection the
  server's engine is checked again before its answer is used;
- no answer within ``timeout`` seconds: :class:`ServerFailedError` (not retried: the server may
  still be working on it; use a smaller ``--batch-size`` or a larger ``--timeout``);
- any other 4xx: :class:`ServerRefusedError`, with the server's message naming the field. A 422
  that names items of the batch (``items[3].context``) fails those rows only (written as error
  rows, run again on a resume); a 413 (body too large) or a 422 on the number of items halves
  the batch;
- items answered with ``OverloadedError`` results (a logitjudge server whose queue filled while it
  ran the batch) are sent again, under the same bound.

Rows are yielded as each call returns, so the caller writes them before the next call: an error
stops the run with every finished row kept.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from logitjudge import __version__
from logitjudge.contract.evaluate import ITEM_FIELDS
from logitjudge.contract.systemone import MODEL_ALIASES
from logitjudge.errors import EngineError, InvalidRequestError, LogitJudgeError, RequestError
from logitjudge.rubrics.questions import MAIN_GROUP
from logitjudge.rubrics.registry import Registry
from logitjudge.rubrics.runner import CONTRAST_GROUP, ItemPlan, finish_plan

__all__ = [
    "EVALUATE_PATH",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "ServerError",
    "ServerRefusedError",
    "ServerMismatchError",
    "ServerUnreachableError",
    "ServerFailedError",
    "ServerInfo",
    "EvaluateClient",
    "normalize_url",
    "check_api_key",
    "wire_evaluators",
    "remote_results",
]

EVALUATE_PATH = "/api/v1/evaluate"

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

OVERLOADED_REASON = "OverloadedError"
"""How a logitjudge server's batch reports an item it could not queue (the reason's prefix)."""


# -- errors ----------------------------------------------------------------------------------------


class ServerError(LogitJudgeError):
    """Base of the errors of a run against a server (``logitjudge evaluate --server``)."""

    error_type = "server_error"


class ServerRefusedError(ServerError, RequestError):
    """The server answered 4xx (or a redirect): the request as sent cannot succeed there.

    Attributes:
        status: the HTTP status.
        items: position in the batch -> the server's message, for the items a 422 names.
        too_large: the body or the number of items is over the server's limit (a smaller batch may pass).
    """

    error_type = "server_refused"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        field: Sequence[str | int] = (),
        items: Mapping[int, str] | None = None,
        too_large: bool = False,
    ) -> None:
        super().__init__(message, field=field)
        self.status = status
        self.items = dict(items or {})
        self.too_large = too_large


class ServerMismatchError(ServerError, RequestError):
    """The server is not what this run's results file was made with (another evaluator version,
    another engine after a reconnect, another model between calls)."""

    error_type = "server_mismatch"


class ServerUnreachableError(ServerError, EngineError):
    """No connection to the server (refused, unknown host, TLS), or it was lost and not regained."""

    error_type = "server_unreachable"


class ServerFailedError(ServerError, EngineError):
    """The server failed: a 5xx after every retry, no answer in time, or an answer that is not an
    evaluate response."""

    error_type = "server_failed"


# -- small pieces ----------------------------------------------------------------------------------


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


def _where(loc: Sequence[Any]) -> str:
    """A pydantic ``loc`` as a path: ``["body", "items", 3, "context", 0]`` -> ``items[3].context[0]``."""
    parts = list(loc)
    if parts[:1] == ["body"]:
        parts = parts[1:]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out or "body"


@dataclass(frozen=True)
class _Said:
    """What an error response says: one line for a person, and its validation entries."""

    text: str
    entries: tuple[dict[str, Any], ...] = ()
    error_type: str | None = None


def _said(response: httpx.Response) -> _Said:
    """The message of an error response, in the shapes of spec A.9 (``detail[]``, ``detail``
    object or string) and the common others (``error``, ``message``); else its text."""
    try:
        body = response.json()
    except ValueError:
        text = " ".join(response.text.split())[:300]
        return _Said(text or response.reason_phrase or "no message")
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        entries = tuple(e for e in detail if isinstance(e, dict))
        shown = "; ".join(f"{_where(e.get('loc') or ())}: {e.get('msg', 'invalid')}" for e in entries[:3])
        if len(entries) > 3:
            shown += f" (and {len(entries) - 3} more)"
        return _Said(shown or "invalid request", entries)
    if isinstance(detail, dict):
        kind = detail.get("error_type")
        message = str(detail.get("message") or kind or detail)
        return _Said(f"{kind}: {message}" if kind else message, error_type=kind)
    if isinstance(detail, str):
        return _Said(detail)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return _Said(str(err["message"]), error_type=err.get("type"))
        if isinstance(err, str):
            return _Said(err)
        if isinstance(body.get("message"), str):
            return _Said(body["message"], error_type=body.get("error_type"))
    return _Said(json.dumps(body, ensure_ascii=False)[:300])


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an HTTP date)."""
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


def _why(exc: httpx.TransportError) -> str:
    """A transport error in a few words (the OS's reason where it gives one)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text})"
    if isinstance(exc, httpx.ConnectTimeout):
        return "the connection timed out"
    return f"the connection failed ({text})"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    """The response's body as a JSON object (``NaN`` and ``Infinity`` refused).

    Raises:
        ServerFailedError: it is not one.
    """
    try:
        body = json.loads(response.content, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ServerFailedError(f"{what}: the answer is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ServerFailedError(f"{what}: the answer is not a JSON object")
    return body


# -- the client ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself.

    Attributes:
        url: its base URL.
        engine: the run record's ``engine``: ``GET /healthz``'s ``engine`` (logitjudge's engine
            description), else ``{"model": <the first model of GET /v1/models that is not an alias>}``.
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


class EvaluateClient:
    """An HTTP client of one evaluator-API server, with bounded retries.

    Args:
        url: the server's base URL (see :func:`normalize_url`).
        api_key: sent as ``Authorization: Bearer <key>`` when given.
        timeout: seconds to wait for one answer.
        retries: retries of a call the server could not answer (0 = none).
        engine_keys: the engine fields that must stay the same when a lost connection is regained
            (a restarted server); empty = not checked.
        notify: called with a line for a person before each retry (default: nothing).
        transport, sleep: for tests (an ``httpx.MockTransport``, a sleep that records).

    Raises:
        ValueError: ``url`` is not an http(s) URL, or ``api_key`` cannot be sent (see :func:`check_api_key`).
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
        self._http.close()

    def __enter__(self) -> EvaluateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one HTTP call, with retries ---------------------------------------------------------------

    def backoff(self, attempt: int, why: str, asked: float | None = None) -> None:
        """Wait before retry ``attempt + 1`` (0-based ``attempt``), saying why."""
        if asked is not None:
            delay = min(asked, RETRY_AFTER_CAP)
        else:
            delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt) * (1 + random.random() / 4)
        self.notify(f"{why}; retrying in {delay:.1f} s ({attempt + 1} of {self.retries})")
        self.sleep(delay)

    def _call(self, method: str, path: str, *, body: Any = None, retry: bool) -> httpx.Response:
        """One request; with ``retry``, a 5xx/429/408 or a lost connection is retried.

        Raises:
            ServerUnreachableError, ServerFailedError, ServerRefusedError: see the module docstring.
        """
        where = f"{method} {self.url}{path}"
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout):
                    raise ServerFailedError(
                        f"{where}: no answer within {self.timeout:g} s (--timeout); the server may be "
                        "busy: try a smaller --batch-size or a larger --timeout"
                    ) from None
                why = _why(exc)
            except httpx.TransportError as exc:
                why = _why(exc)
            else:
                status = response.status_code
                if status >= 500 or status in RETRY_STATUSES:
                    said = _said(response)
                    if last:
                        tries = f" after {attempts} attempts" if attempts > 1 else ""
                        raise ServerFailedError(f"{where}: the server answered {status} ({said.text}){tries}")
                    self.backoff(attempt, f"the server answered {status} ({said.text})", _retry_after(response))
                    continue
                if 300 <= status < 400:
                    target = response.headers.get("location", "another URL")
                    raise ServerRefusedError(
                        f"{where}: the server redirects ({status}) to {target}; give that URL as --server",
                        status=status,
                    )
                if status >= 400:
                    raise self._refused(response, where)
                return response
            # a transport error: nothing answered
            if not retry:
                raise ServerUnreachableError(
                    f"cannot reach the server at {self.url}: {why}. Is `logitjudge serve` running there? "
                    "(It listens once its model has loaded.)"
                )
            if last:
                raise ServerUnreachableError(
                    f"lost the server at {self.url}: {why}, {attempts} attempts; the rows written so far are kept"
                )
            self._reconnected = True
            self.backoff(attempt, f"{where}: {why}")
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _refused(self, response: httpx.Response, where: str) -> ServerRefusedError:
        status = response.status_code
        said = _said(response)
        if status in (401, 403):
            return ServerRefusedError(
                f"{where}: the server refused the API key ({status} {said.text}); set LOGITJUDGE_API_KEY "
                "(or --api-key) to a key the server accepts",
                status=status,
            )
        if status == 404 and said.error_type in (None, "not_found"):
            return ServerRefusedError(
                f"{where}: not found (404: {said.text}); is {self.url} an evaluator-API server "
                "such as `logitjudge serve`?",
                status=status,
            )
        items: dict[int, str] = {}
        naming_items = 0  # entries that blame one item of the batch
        too_large = status == 413
        field: tuple[str | int, ...] = ()
        for entry in said.entries:
            loc = list(entry.get("loc") or ())
            loc = loc[1:] if loc[:1] == ["body"] else loc
            if not field:
                field = tuple(p for p in loc if isinstance(p, (str, int)))
            if len(loc) >= 2 and loc[0] == "items" and isinstance(loc[1], int):
                msg = f"{_where(loc[2:]) if len(loc) > 2 else 'item'}: {entry.get('msg', 'invalid')}"
                items[loc[1]] = f"{items[loc[1]]}; {msg}" if loc[1] in items else msg
                naming_items += 1
            elif loc == ["items"] and entry.get("type") == "too_long":
                too_large = True
        if naming_items < len(said.entries):  # the batch itself is refused too
            items = {}
        return ServerRefusedError(
            f"{where}: the server refused the request ({status}): {said.text}",
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
            return _json_object(response, f"GET {self.url}{path}")
        except ServerFailedError:
            return None

    # -- the API -----------------------------------------------------------------------------------

    def info(self) -> ServerInfo:
        """Who the server is: ``GET /healthz`` and ``GET /v1/models`` (each optional; the second
        checks the API key).

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

    def evaluate(
        self,
        evaluators: Sequence[str],
        items: Sequence[Mapping[str, Any]],
        *,
        model: str,
        thresholds: Mapping[str, float] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """One ``POST /api/v1/evaluate`` of ``items`` (the batch form), with retries.

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
        what = f"POST {self.url}{EVALUATE_PATH}"
        data = _json_object(response, what)
        results = data.get("results")
        if not isinstance(results, list) or len(results) != len(items):
            got = f"{len(results)} results" if isinstance(results, list) else "no `results` list"
            raise ServerFailedError(f"{what}: not an evaluate batch response ({got} for {len(items)} items)")
        for r in results:
            if not (
                isinstance(r, dict)
                and isinstance(r.get("results"), dict)
                and all(isinstance(v, dict) and isinstance(v.get("status"), str) for v in r["results"].values())
            ):
                raise ServerFailedError(f"{what}: an item result is not an object of evaluator results")
        if self._reconnected:
            self._reconnected = False
            self._check_same_engine()
        served = data.get("model")
        return (served if isinstance(served, str) else None), results


# -- rows through the server -----------------------------------------------------------------------


def wire_evaluators(plan: ItemPlan, registry: Registry) -> tuple[str, ...]:
    """The evaluator names a planned row sends: the evaluators that run on it (not those decided
    without a model), each by name, or ``name@version`` when the selection pins an earlier version."""
    out = []
    for sel, _ in plan.owners:
        d = sel.definition
        out.append(d.name if registry.evaluators.get(d.name) == d else f"{d.name}@{d.version}")
    return tuple(out)


@dataclass
class _Row:
    index: int
    rid: str
    plan: ItemPlan
    names: tuple[str, ...]
    wire: dict[str, Any] = field(default_factory=dict)
    unsendable: LogitJudgeError | None = None


def _prepare(index: int, rid: str, plan: ItemPlan, registry: Registry) -> _Row:
    """The row's request item and evaluator names, or why it cannot be sent: a state that is not
    valid Text (as a local run's engine request refuses it), or a blank context chunk (which a
    server refuses for the whole item)."""
    row = _Row(index, rid, plan, wire_evaluators(plan, registry))
    item = plan.item
    row.wire = {"id": rid, **{f: getattr(item, f) for f in ITEM_FIELDS if getattr(item, f) is not None}}
    if not row.names:
        return row
    try:
        plan.engine_requests()
    except InvalidRequestError as exc:
        row.unsendable = exc
        return row
    blank = item.blank_chunks()
    if blank:
        row.unsendable = ServerRefusedError(
            f"not sent: context[{blank[0]}] is blank (only whitespace or invisible characters), and a server "
            "refuses an item with a blank chunk; remove it",
            status=0,
        )
    return row


def _failed_record(row: _Row, exc: LogitJudgeError, thresholds: Mapping[str, float]) -> dict[str, Any]:
    """The row with its local results, and ``error`` (``exc``) for every evaluator that needed an answer."""
    keys = [MAIN_GROUP, CONTRAST_GROUP, *row.plan.groups]
    result = finish_plan(row.plan, {k: exc for k in keys}, thresholds)
    return result.model_dump(mode="json", exclude_none=True)


def _merged(row: _Row, item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The server's item result with the row's local results (skipped, ...) merged in, in the
    selection's order; ``passed`` recomputed over both as the engine's runner computes it.

    Raises:
        ServerFailedError: a sent evaluator has no result, or the item's id is another row's.
        ServerMismatchError: a result reports another version than the one selected here.
    """
    if item.get("id") not in (None, row.rid):
        raise ServerFailedError(f"{where}: the results are not in the order of the items (got id {item.get('id')!r})")
    got = item["results"]
    for sel, _ in row.plan.owners:
        d = sel.definition
        if d.name not in got:
            raise ServerFailedError(f"{where}: no result for {d.name} on row {row.rid}")
        version = got[d.name].get("version")
        fallback = d.head.fallback if d.head is not None else None  # a server without the head answers it
        if version is not None and str(version) not in (d.version, fallback):
            raise ServerMismatchError(
                f"the server answers {d.name} version {version}, where the selection here is version "
                f"{d.version}, so the rows would not be what {d.name} means in this run; update the "
                f"server or this install, or select {d.name}@{version} (if this install knows it)"
            )
    early = {n: r.model_dump(mode="json", exclude_none=True) for n, r in row.plan.early.items()}
    results = {n: early[n] if n in early else got[n] for n in row.plan.order}
    verdicts = [r["passed"] for r in results.values() if r.get("status") == "ok" and isinstance(r.get("passed"), bool)]
    out: dict[str, Any] = {"id": row.rid, "results": results}
    if verdicts:
        out["passed"] = all(verdicts)
    out["usage"] = item.get("usage") if isinstance(item.get("usage"), dict) else {}
    out.update({k: v for k, v in item.items() if k not in ("id", "results", "passed", "usage")})
    return out


def _overloaded(record: Mapping[str, Any]) -> bool:
    return any(
        r.get("status") == "error" and str(r.get("reason", "")).startswith(OVERLOADED_REASON)
        for r in record.get("results", {}).values()
        if isinstance(r, Mapping)
    )


class _Sender:
    """Sends batches of rows and turns the answers into records (see :func:`remote_results`)."""

    def __init__(
        self, client: EvaluateClient, *, model: str, thresholds: Mapping[str, float], extra: Mapping[str, Any]
    ) -> None:
        self.client = client
        self.model = model
        self.thresholds = dict(thresholds)
        self.extra = dict(extra)
        self.served: str | None = None
        self.cap: int | None = None  # items per call the server took, after it refused more

    def send(self, rows: Sequence[_Row]) -> dict[int, dict[str, Any]]:
        """Records of ``rows`` by index: one call (or a few, when the server refuses the size or some items)."""
        if self.cap is not None and len(rows) > self.cap:
            out: dict[int, dict[str, Any]] = {}
            for start in range(0, len(rows), self.cap):
                out.update(self.send(rows[start : start + self.cap]))
            return out
        names = rows[0].names
        own = {sel.definition.name for sel, _ in rows[0].plan.owners}
        try:
            served, got = self.client.evaluate(
                names,
                [r.wire for r in rows],
                model=self.model,
                thresholds={k: v for k, v in self.thresholds.items() if k in own},
                extra=self.extra,
            )
        except ServerRefusedError as exc:
            if exc.too_large and len(rows) > 1:
                half = (len(rows) + 1) // 2
                self.cap = half if self.cap is None else min(self.cap, half)
                return {**self.send(rows[:half]), **self.send(rows[half:])}
            if exc.items and all(0 <= j < len(rows) for j in exc.items):
                out = {
                    rows[j].index: _failed_record(
                        rows[j], ServerRefusedError(f"the server refused the item ({exc.status}): {msg}", status=0), {}
                    )
                    for j, msg in exc.items.items()
                }
                rest = [r for j, r in enumerate(rows) if j not in exc.items]
                return {**out, **(self.send(rest) if rest else {})}
            if exc.too_large:  # one item, over the server's body limit
                return {rows[0].index: _failed_record(rows[0], exc, {})}
            raise
        if served is not None:
            if self.served is not None and served != self.served:
                raise ServerMismatchError(
                    f"the server at {self.client.url} now serves {served!r}, not {self.served!r} as when "
                    "this run began; its answers cannot go in this results file"
                )
            self.served = served
        where = f"POST {self.client.url}{EVALUATE_PATH}"
        return {r.index: _merged(r, item, where) for r, item in zip(rows, got, strict=True)}

    def batch(self, rows: Sequence[_Row]) -> dict[int, dict[str, Any]]:
        """:meth:`send`, then the items the server was too busy for again, with backoff (bounded)."""
        done = self.send(rows)
        todo = [r for r in rows if _overloaded(done[r.index])]
        for attempt in range(self.client.retries):
            if not todo:
                break
            self.client.backoff(attempt, f"the server was overloaded for {len(todo)} of the items")
            done.update(self.send(todo))
            todo = [r for r in todo if _overloaded(done[r.index])]
        return done


def remote_results(
    client: EvaluateClient,
    pending: Sequence[tuple[str, ItemPlan]],
    *,
    registry: Registry,
    thresholds: Mapping[str, float],
    model: str,
    batch_size: int,
    extra: Mapping[str, Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run planned rows through the server: ``(position in pending, results record)`` for each
    row, as each call returns (in ``pending`` order within a call).

    A record is what a local run's :func:`~logitjudge.rubrics.runner.finish_plan` dumps
    (``exclude_none``): ``{"id", "results", "passed"?, "usage"}``, plus any other field the server
    adds to an item. A row that runs no evaluator makes no call; rows that send other evaluators
    than the batch gathered so far start a new call.

    Args:
        pending: (row id, plan) of each row to run, the plans as :func:`plan_item` made them
            (``strict=False``).
        thresholds: the ``--threshold`` overrides (validated), sent with the evaluators they name.
        model: the ``model`` each request names (``--request-model``).
        extra: more top-level request fields (a logitjudge extension such as ``x_strict_wire``).

    Raises:
        ServerError: the run cannot go on (see the module docstring); the rows yielded before stay valid.
    """
    sender = _Sender(client, model=model, thresholds=thresholds, extra=extra or {})
    batch: list[_Row] = []
    riders: dict[int, dict[str, Any]] = {}  # rows decided here, yielded with the call they follow

    def flush() -> Iterator[tuple[int, dict[str, Any]]]:
        done = dict(riders)
        if batch:
            done.update(sender.batch(batch))
        batch.clear()
        riders.clear()
        for index in sorted(done):
            yield index, done[index]

    for index, (rid, plan) in enumerate(pending):
        row = _prepare(index, rid, plan, registry)
        if not row.names or row.unsendable:
            if row.unsendable:
                record = _failed_record(row, row.unsendable, thresholds)
            else:
                record = finish_plan(plan, {}, thresholds).model_dump(mode="json", exclude_none=True)
            riders[index] = record
            if not batch:
                yield from flush()
            continue
        if batch and (batch[0].names != row.names or len(batch) >= batch_size):
            yield from flush()
        batch.append(row)
    yield from flush()
