"""The System One API (``spec/api.md`` Part A) as one router: ``POST /v1/systemone``, ``GET /v1/models``.

Each route reads like the request's path: FastAPI parses the body into the wire model, then
:meth:`ServerState.check_systemone` validates what the wire model cannot (the served model, the
operator's limits, image assets), then one call, :meth:`ServerState.answer_systemone`, runs it
through the batching scheduler, and the route returns the response. Errors are raised, never
answered here: their statuses come from the one table in ``logitjudge.server.errors``.

What a route reaches of the app (judge, scheduler, metrics, config) is :class:`ServerState`,
which ``create_app`` stores as ``app.state.server``; routes get it through the one typed
dependency :data:`State` (:func:`server_state`). The evaluator API
(``logitjudge.server.evaluate_routes``) uses the same state and the same :meth:`ServerState.answer`.

This module imports no torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from logitjudge import __version__
from logitjudge.contract import systemone as schemas
from logitjudge.contract.systemone import MODEL_ALIASES
from logitjudge.engine.scheduler import Scheduler
from logitjudge.engine.types import EngineRequest, EngineResult
from logitjudge.errors import InvalidRequestError, LogitJudgeError, UnsupportedInputError
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.server.config import ServerConfig
from logitjudge.server.errors import ERROR_RESPONSES, ClientDisconnected
from logitjudge.server.judgelike import ServedJudge
from logitjudge.server.limits import RequestLimits, check_systemone
from logitjudge.server.metrics import ServerMetrics

logger = logging.getLogger("logitjudge.server")

__all__ = ["router", "ServerState", "State", "server_state", "describe", "RELEASE_DATE"]

T = TypeVar("T")

RELEASE_DATE = "2026-11-30"
"""Reported as ``release_date`` of models whose engine does not say (this server's release)."""


def describe(judge: JudgeLike) -> dict[str, Any]:
    """``judge.describe()`` as plain JSON (anything not JSON becomes its ``str``)."""
    return dict(json.loads(json.dumps(judge.describe(), default=str)))


async def _wait_for_disconnect(request: Request) -> None:
    # After the body, the next ASGI message is http.disconnect (when the client goes away, or
    # when the response is complete, by which time this waiter is cancelled).
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it (freeing its queue place).

    Raises:
        ClientDisconnected: the client left first (the table answers 499).
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()


def by_question_id(exc: InvalidRequestError, ids: Sequence[str]) -> InvalidRequestError:
    """The engine names questions by index (``("questions", 1, ...)``); the wire names them by id.

    Returns ``exc`` itself when it names no question, else a new error with ``field`` and every
    ``details`` location renamed (the engine's error is left as it was).
    """

    def rename(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
        if len(loc) >= 2 and loc[0] == "questions" and isinstance(loc[1], int) and loc[1] < len(ids):
            return ("questions", ids[loc[1]], *loc[2:])
        return loc

    if rename(exc.field) == exc.field and all(rename(d["loc"]) == d["loc"] for d in exc.details):
        return exc
    details = [{**d, "loc": rename(d["loc"])} for d in exc.details]
    return InvalidRequestError(exc.message, field=rename(exc.field), details=details)


@dataclass(frozen=True)
class ServerState:
    """What the routes reach of one app: set once by ``create_app`` as ``app.state.server``.

    Attributes:
        judge: the judge served (a :class:`~logitjudge.judge.Judge` over any engine, e.g. a
            scripted one; :class:`~logitjudge.server.judgelike.ServedJudge` says what is used).
        scheduler: batches engine calls; ``None`` only on an app not built by ``create_app``
            (``include_evaluate_routes`` on a bare app), which then calls the judge directly.
        metrics: the Prometheus metrics (``None`` as for ``scheduler``).
        config: the server's limits and switches (``None`` as for ``scheduler``).
    """

    judge: ServedJudge
    scheduler: Scheduler | None = None
    metrics: ServerMetrics | None = None
    config: ServerConfig | None = None

    @cached_property
    def fitted_warnings(self) -> dict[str, str]:
        """The ``x_warning`` of each evaluator version whose fitted coefficients were fitted on
        another engine than the one served, by ``"<name>@<version>"``
        (:func:`logitjudge.rubrics.runner.fitted_warnings`); computed and logged once, on first use."""
        from logitjudge.rubrics.head_plan import answers_itself, head_fallback_warning
        from logitjudge.rubrics.registry import default_registry
        from logitjudge.rubrics.runner import fitted_warnings

        registry, engine = default_registry(), self.judge.describe()
        found = fitted_warnings(registry, engine)
        for warning in found.values():
            logger.warning("%s", warning)
        for defn in registry.evaluators.values():  # current versions that read a head this engine lacks
            if defn.head is None or answers_itself(defn, engine):
                continue
            fallback = registry.versions[f"{defn.name}@{defn.head.fallback}"]
            logger.warning("%s", head_fallback_warning(defn, fallback, engine))
        return found

    @property
    def limits(self) -> RequestLimits:
        """The per-request limits checked after validation (defaults without a config)."""
        return self.config.limits if self.config is not None else RequestLimits()

    def strict_wire(self, requested: bool | None) -> bool:
        """Whether a response leaves out every ``x_`` field: the request's ``x_strict_wire`` when
        it says, else the server's ``strict_wire`` (off without a config)."""
        if requested is not None:
            return requested
        return self.config.strict_wire if self.config is not None else False

    def check_systemone(self, body: schemas.SystemOneRequest) -> schemas.SystemOneRequest:
        """The checks the wire model cannot make, before any tokenizer work.

        Raises:
            UnknownModelError: ``model`` is not served here (400).
            InvalidRequestError: over one of the operator's limits (422 naming it).
            UnsupportedInputError: image ``assets`` (400, as the spec proposes: A.2 T11).
        """
        self.judge.check_model(body.model)
        check_systemone(body, self.limits)
        if body.model_extra and "assets" in body.model_extra:
            raise UnsupportedInputError(field=("assets",))
        return body

    async def answer(self, req: schemas.SystemOneRequest) -> schemas.SystemOneResponse:
        """Answer a validated request in one engine request, through the scheduler.

        Raises:
            LogitJudgeError: the engine's (413 over budget, 529 overloaded, ...); an
                :class:`InvalidRequestError` names the question by its id (:func:`by_question_id`).
        """
        try:
            result = await self.answer_engine(self.judge.to_engine(req))
        except InvalidRequestError as exc:
            raise by_question_id(exc, list(req.questions)) from None
        return self.judge.to_response(req, result)

    async def answer_engine(self, request: EngineRequest) -> EngineResult:
        """Answer one typed engine request through the scheduler (the evaluate route's entry;
        :meth:`answer` converts the wire to it and back).

        Raises:
            LogitJudgeError: the engine's; an :class:`InvalidRequestError` names questions by
                index (``("questions", i, ...)``), as the engine does.
        """
        return await self._run(request)

    async def answer_systemone(self, req: schemas.SystemOneRequest, request: Request) -> schemas.SystemOneResponse:
        """:meth:`answer` for ``POST /v1/systemone``: cancelled when the client leaves, and counted.

        Raises:
            ClientDisconnected: the client left before the answer (its queue place is freed).
        """
        response = await until_disconnected(request, self.answer(req))
        if self.metrics is not None:
            self.metrics.observe_answers([q.type for q in req.questions.values()], response.usage.input_tokens)
        return response

    async def _run(self, engine_request: EngineRequest) -> EngineResult:
        if self.scheduler is not None:
            return await self.scheduler.submit(engine_request)
        (result,) = await run_in_threadpool(self.judge.answer_many, [engine_request])
        if isinstance(result, LogitJudgeError):
            raise result
        return result


def server_state(request: Request) -> ServerState:
    """The app's :class:`ServerState` (the one typed way a route reaches the app's state)."""
    state = request.app.state.server
    assert isinstance(state, ServerState), "the app was not built by create_app"
    return state


State = Annotated[ServerState, Depends(server_state)]
"""A route parameter of this type receives the app's :class:`ServerState`."""


router = APIRouter()


@router.post(
    "/v1/systemone",
    response_model=schemas.SystemOneResponse,
    responses=ERROR_RESPONSES,
    summary="Answer typed questions about a state",
    tags=["System One"],
)
async def systemone(body: schemas.SystemOneRequest, request: Request, state: State) -> Response:
    """Noul, choice and score questions about one state, each answered from one distribution.

    Unknown top-level fields are ignored; question ids and option names come back byte for byte.
    With `x_strict_wire: true` (or a server started with `--strict-wire`) the answers carry no
    `x_` field.
    """
    req = state.check_systemone(body)
    response = await state.answer_systemone(req, request)
    return JSONResponse(
        response.to_wire(strict=state.strict_wire(req.x_strict_wire)),
        headers={"x-typesafe-request-id": f"req_{uuid.uuid4().hex}"},
    )


def _calibration_words(described: dict[str, Any]) -> str:
    """``calibration shipped:<file> (<digest>)``, ``calibration <path> (<digest>)`` or ``uncalibrated``."""
    digest = described.get("calibration")
    if not digest:
        return "uncalibrated"
    return f"calibration {described.get('calibration_origin') or 'file'} ({digest})"


def _reader_words(described: dict[str, Any]) -> str:
    """``, heads chunk_support, adapters chunk_support`` for the trained heads and branch adapters
    loaded, or nothing."""
    heads, adapters = described.get("heads") or [], described.get("adapters") or []
    return (f", heads {', '.join(heads)}" if heads else "") + (f", adapters {', '.join(adapters)}" if adapters else "")


@router.get("/v1/models", response_model=schemas.ListModelsResponse, tags=["System One"])
async def list_models(state: State) -> schemas.ListModelsResponse:
    """The models this server answers to: the ``jev-latest`` alias first, then the served model."""
    described = describe(state.judge)
    release = str(described.get("release_date") or RELEASE_DATE)
    name = state.judge.model_name
    models = [
        schemas.ModelMetadata(
            name=alias,
            description=f"Alias of {name}, the model this server answers with.",
            release_date=release,
        )
        for alias in MODEL_ALIASES
    ]
    models.append(
        schemas.ModelMetadata(
            name=name,
            description=f"{name} served by logitjudge {__version__} "
            f"({described.get('device', '?')}, {described.get('precision', described.get('dtype', '?'))}, "
            f"prompt {described.get('prompt_version', '?')}, {_calibration_words(described)}"
            f"{_reader_words(described)}).",
            release_date=release,
        )
    )
    return schemas.ListModelsResponse(models=models)
