"""The HTTP server: a drop-in for the System One API (``spec/api.md`` Part A) over a local Judge.

::

    from logitjudge import Judge
    from logitjudge.server.app import create_app
    app = create_app(Judge.load(), api_keys=["secret"])     # then: uvicorn.run(app)

or ``logitjudge serve --port 8000``. Routes:

- ``POST /v1/systemone``: questions about a state, answered through the batching scheduler;
- ``GET /v1/models``: ``jev-latest`` first, then the served model;
- ``GET /healthz``: model, engine description and queue state (503 while draining);
- ``GET /metrics``: Prometheus text format (see ``logitjudge.server.metrics``);
- ``/docs`` (Swagger UI), ``/redoc``, ``/openapi.json``: the API documentation, with every asset
  served by the app itself from the ``fastapi-offline`` wheel (under :data:`DOCS_ASSETS`), so the
  pages work on an air-gapped machine;
- ``POST /api/v1/evaluate``: the evaluator API, when ``logitjudge.server.evaluate_routes`` exists.

The server imports no torch: it calls the same :class:`~logitjudge.judge.Judge` as the CLI, via
:class:`~logitjudge.engine.scheduler.Scheduler` (blocking engine calls run in one worker thread).
Errors map to HTTP in one table, ``logitjudge.server.errors``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from logitjudge import __version__
from logitjudge.engine.scheduler import Scheduler
from logitjudge.errors import InvalidRequestError, RequestError
from logitjudge.judge import MODEL_ALIASES
from logitjudge.server import schemas
from logitjudge.server.config import ACCELERATOR_BATCHING, CPU_BATCHING, ServerConfig
from logitjudge.server.errors import ERROR_RESPONSES, install_error_handlers
from logitjudge.server.limits import check_systemone
from logitjudge.server.metrics import ServerMetrics
from logitjudge.server.middleware import DOCS_ASSETS, BearerAuthMiddleware, BodyMiddleware, MetricsMiddleware

__all__ = ["ServerConfig", "create_app", "default_batching", "CPU_BATCHING", "ACCELERATOR_BATCHING"]

logger = logging.getLogger("logitjudge.server")

T = TypeVar("T")

RELEASE_DATE = "2026-11-30"
"""Reported as ``release_date`` of models whose engine does not say (this server's release)."""


def default_batching(judge: Any) -> tuple[int, int]:
    """(max_batch_tokens, max_batch_requests) for ``judge``'s device (see :data:`CPU_BATCHING`)."""
    device = str(_jsonable(judge.describe()).get("device", "cpu"))
    return CPU_BATCHING if device.startswith("cpu") else ACCELERATOR_BATCHING


class ClientDisconnected(Exception):
    """The HTTP client closed the connection before its answer was ready."""


async def _wait_for_disconnect(request: Request) -> None:
    # After the body, the next ASGI message is http.disconnect (when the client goes away, or
    # when the response is complete, by which time this waiter is cancelled).
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it (freeing its queue place)."""
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


def _remap_question_field(exc: InvalidRequestError, ids: Sequence[str]) -> InvalidRequestError:
    """The engine names questions by index; the wire names them by id."""
    field = exc.field
    if len(field) >= 2 and field[0] == "questions" and isinstance(field[1], int) and field[1] < len(ids):
        exc.field = ("questions", ids[field[1]], *field[2:])
    return exc


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _include_evaluate_routes(app: FastAPI, judge: Any) -> None:
    """Mount the evaluator API (``POST /api/v1/evaluate``) when its module exists."""
    if importlib.util.find_spec("logitjudge.server.evaluate_routes") is None:
        return
    module = importlib.import_module("logitjudge.server.evaluate_routes")
    if hasattr(module, "include_evaluate_routes"):
        module.include_evaluate_routes(app, judge)
    elif hasattr(module, "router"):
        app.include_router(module.router)


def create_app(
    judge: Any,
    *,
    api_keys: Sequence[str] = ServerConfig.api_keys,
    max_queue: int = ServerConfig.max_queue,
    max_batch_tokens: int | None = None,
    max_batch_requests: int | None = None,
    max_body_bytes: int = ServerConfig.max_body_bytes,
    drain_timeout: float = ServerConfig.drain_timeout,
    max_questions: int = ServerConfig.max_questions,
    max_items: int = ServerConfig.max_items,
    max_text_chars: int = ServerConfig.max_text_chars,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the ASGI app serving ``judge`` (see :class:`~logitjudge.server.config.ServerConfig`,
    whose defaults these are, for the limits).

    Args:
        judge: a :class:`~logitjudge.judge.Judge` (any engine, e.g. a scripted one in tests).
        max_batch_tokens, max_batch_requests: ``None`` = :func:`default_batching` for the judge's
            device (see :data:`CPU_BATCHING` and :data:`ACCELERATOR_BATCHING`).
        registry: the Prometheus registry to fill (default: a new one per app).

    The app's state holds ``judge``, ``scheduler``, ``metrics`` and ``config``; other routers
    (the evaluator API) submit engine work through ``request.app.state.scheduler``.
    """
    default_tokens, default_requests = default_batching(judge)
    config = ServerConfig(
        api_keys=tuple(api_keys),
        max_queue=max_queue,
        max_batch_tokens=max_batch_tokens if max_batch_tokens is not None else default_tokens,
        max_batch_requests=max_batch_requests if max_batch_requests is not None else default_requests,
        max_body_bytes=max_body_bytes,
        drain_timeout=drain_timeout,
        max_questions=max_questions,
        max_items=max_items,
        max_text_chars=max_text_chars,
    )
    metrics = ServerMetrics(registry)

    def run_batch(requests: Sequence[Any]) -> list[Any]:
        # Every engine call of both APIs passes here (in the scheduler's worker thread).
        results = judge.run_batch(requests)
        try:
            metrics.observe_results(results)  # low x_option_mass: a WARNING and a counter
        except Exception:  # noqa: BLE001 - flagging must never cost a client its answers
            logger.exception("could not check the answers' option mass")
        return results

    scheduler = Scheduler(
        run_batch,
        max_queue=config.max_queue,
        max_batch_tokens=config.max_batch_tokens,
        max_batch_requests=config.max_batch_requests,
        observer=metrics,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        # Uvicorn has stopped accepting connections and waited for open ones; whatever the
        # scheduler still holds is answered before the process exits.
        await scheduler.close(timeout=config.drain_timeout)

    # FastAPI's own /docs and /redoc load Swagger UI and ReDoc from a CDN (blank pages offline);
    # FastAPIOffline serves the same pages with the assets its wheel ships. validatorUrl=None:
    # otherwise Swagger UI fetches a badge from validator.swagger.io for every non-local host.
    app = FastAPIOffline(
        title="logitjudge",
        version=__version__,
        summary="An open, local judge engine: a drop-in for POST /v1/systemone.",
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.state.judge = judge
    app.state.scheduler = scheduler
    app.state.metrics = metrics
    app.state.config = config
    install_error_handlers(app)

    @app.post(
        "/v1/systemone",
        response_model=schemas.SystemOneResponse,
        responses=ERROR_RESPONSES,
        summary="Answer typed questions about a state",
        tags=["System One"],
    )
    async def systemone(body: schemas.SystemOneRequest, request: Request) -> Response:
        """Noul, choice and score questions about one state, each answered from one distribution.

        Unknown top-level fields are ignored; question ids and option names come back byte for byte.
        """
        req = judge.validate(body)  # raises UnknownModelError (400) for a model not served here
        check_systemone(req, config.limits)  # 422 naming the limit, before any tokenizer work
        if req.model_extra and "assets" in req.model_extra:
            err = RequestError(
                "image assets are not supported by this model (text-only engine)", field=("assets",)
            )
            err.error_type = "api_usage_error"  # 400, as the spec proposes (A.2 T11)
            raise err
        ids = list(req.questions)
        try:
            result = await _unless_disconnected(request, scheduler.submit(judge.to_engine(req)))
        except ClientDisconnected:
            return Response(status_code=499)
        except InvalidRequestError as exc:
            raise _remap_question_field(exc, ids) from None
        response = judge.to_response(req, result)
        metrics.observe_answers([q.type for q in req.questions.values()], result.usage.input_tokens)
        return JSONResponse(
            response.model_dump(mode="json", exclude_none=True),
            headers={"x-typesafe-request-id": f"req_{uuid.uuid4().hex}"},
        )

    @app.get("/v1/models", response_model=schemas.ListModelsResponse, tags=["System One"])
    async def list_models() -> schemas.ListModelsResponse:
        """The models this server answers to: the ``jev-latest`` alias first, then the served model."""
        described = _jsonable(judge.describe())
        release = str(described.get("release_date") or RELEASE_DATE)
        name = judge.model_name
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
                f"({described.get('device', '?')}, {described.get('dtype', '?')}).",
                release_date=release,
            )
        )
        return schemas.ListModelsResponse(models=models)

    @app.get("/healthz", tags=["Operations"])
    async def healthz() -> JSONResponse:
        """Liveness and readiness: 200 while serving, 503 once shutdown has begun."""
        body = {
            "status": "draining" if scheduler.closing else "ok",
            "model": judge.model_name,
            "queue": {
                "waiting": scheduler.waiting,
                "in_flight": scheduler.in_flight,
                "max_queue": config.max_queue,
            },
            "batching": {
                "max_batch_tokens": config.max_batch_tokens,
                "max_batch_requests": config.max_batch_requests,
            },
            "engine": _jsonable(judge.describe()),
            "auth": bool(config.api_keys),
            "version": __version__,
        }
        return JSONResponse(body, status_code=503 if scheduler.closing else 200)

    @app.get("/metrics", tags=["Operations"], response_class=Response)
    async def prometheus_metrics() -> Response:
        """Prometheus text exposition format."""
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    _include_evaluate_routes(app, judge)

    # Added innermost first: the last one added sees the request first.
    app.add_middleware(BodyMiddleware, max_body_bytes=config.max_body_bytes)
    app.add_middleware(BearerAuthMiddleware, keys=config.api_keys)
    known_paths = [path for route in app.routes if isinstance(path := getattr(route, "path", None), str)]
    app.add_middleware(MetricsMiddleware, metrics=metrics, known_paths=known_paths)
    return app
