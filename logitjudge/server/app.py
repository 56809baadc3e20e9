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
- ``POST /api/v1/evaluate``: the evaluator API.

The routes live in module-level routers (``logitjudge.server.systemone_routes``,
``logitjudge.server.evaluate_routes``, and :data:`operations` here); :func:`create_app` only
wires them to one :class:`~logitjudge.server.systemone_routes.ServerState`, the error table and
the middlewares.

The server imports no torch: it calls the same :class:`~logitjudge.judge.Judge` as the CLI, via
:class:`~logitjudge.engine.scheduler.Scheduler` (blocking engine calls run in one worker thread).
Errors map to HTTP in one table, ``logitjudge.server.errors``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from logitjudge import __version__
from logitjudge.engine.config import VLLM_CONCURRENT_BATCHES, SchedulerConfig
from logitjudge.engine.scheduler import Scheduler
from logitjudge.engine.types import EngineRequest, EngineResult
from logitjudge.errors import LogitJudgeError
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.server import evaluate_routes, systemone_routes
from logitjudge.server.config import ACCELERATOR_BATCHING, CPU_BATCHING, ServerConfig
from logitjudge.server.errors import DRAINING_STATUS, install_error_handlers
from logitjudge.server.judgelike import ServedJudge
from logitjudge.server.metrics import ServerMetrics
from logitjudge.server.middleware import DOCS_ASSETS, BearerAuthMiddleware, BodyMiddleware, MetricsMiddleware
from logitjudge.server.systemone_routes import RELEASE_DATE, ServerState, State, describe

__all__ = [
    "ServerConfig",
    "create_app",
    "operations",
    "RELEASE_DATE",
    "default_batching",
    "CPU_BATCHING",
    "ACCELERATOR_BATCHING",
]

logger = logging.getLogger("logitjudge.server")


def default_batching(judge: JudgeLike) -> tuple[int, int]:
    """(max_num_batched_tokens, max_batch_requests) for ``judge``'s device (see :data:`CPU_BATCHING`)."""
    device = str(describe(judge).get("device", "cpu"))
    return CPU_BATCHING if device.startswith("cpu") else ACCELERATOR_BATCHING


def default_concurrency(judge: JudgeLike) -> int:
    """Engine calls in flight at once for ``judge``'s backend: :data:`VLLM_CONCURRENT_BATCHES` on
    vLLM (continuous batching: hand it every request at once), else 1 (one forward at a time)."""
    backend = describe(judge).get("backend", "transformers")
    return VLLM_CONCURRENT_BATCHES if backend == "vllm" else SchedulerConfig.max_concurrent_batches


operations = APIRouter()
"""``GET /healthz`` and ``GET /metrics``: probes for load balancers and Prometheus, not the API."""


@operations.get("/healthz", tags=["Operations"])
async def healthz(state: State) -> JSONResponse:
    """Liveness and readiness: 200 while serving, 503 once shutdown has begun."""
    scheduler, config = state.scheduler, state.config
    assert scheduler is not None and config is not None, "create_app sets both"
    body = {
        "status": "draining" if scheduler.closing else "ok",
        "model": state.judge.model_name,
        "queue": {
            "waiting": scheduler.waiting,
            "in_flight": scheduler.in_flight,
            "max_queue": config.max_queue,
        },
        "batching": {
            "max_num_batched_tokens": config.max_num_batched_tokens,
            "max_batch_requests": config.max_batch_requests,
            "max_concurrent_batches": config.max_concurrent_batches,
        },
        "engine": describe(state.judge),
        "auth": bool(config.api_keys),
        "strict_wire": config.strict_wire,
        "version": __version__,
    }
    return JSONResponse(body, status_code=DRAINING_STATUS if scheduler.closing else 200)


@operations.get("/metrics", tags=["Operations"], response_class=Response)
async def prometheus_metrics(state: State) -> Response:
    """Prometheus text exposition format."""
    assert state.metrics is not None, "create_app sets it"
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _scheduler(judge: JudgeLike, config: ServerConfig, metrics: ServerMetrics) -> Scheduler:
    """The one scheduler of an app: every engine call of both APIs goes through it."""

    def run_batch(requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        # In the scheduler's worker thread.
        results = judge.answer_many(requests)
        try:
            metrics.observe_results(results)  # low x_option_mass: a WARNING and a counter
        except Exception:  # noqa: BLE001 - flagging must never cost a client its answers
            logger.exception("could not check the answers' option mass")
        return results

    return Scheduler(
        run_batch,
        max_queue=config.max_queue,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_batch_requests=config.max_batch_requests,
        max_concurrent_batches=config.max_concurrent_batches,
        observer=metrics,
    )


def create_app(
    judge: ServedJudge,
    *,
    api_keys: Sequence[str] = ServerConfig.api_keys,
    max_queue: int = ServerConfig.max_queue,
    max_num_batched_tokens: int | None = None,
    max_batch_requests: int | None = None,
    max_concurrent_batches: int | None = None,
    max_body_bytes: int = ServerConfig.max_body_bytes,
    drain_timeout: float = ServerConfig.drain_timeout,
    max_questions: int = ServerConfig.max_questions,
    max_items: int = ServerConfig.max_items,
    max_text_chars: int = ServerConfig.max_text_chars,
    strict_wire: bool = ServerConfig.strict_wire,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """Build the ASGI app serving ``judge`` (see :class:`ServerConfig` for the limits).

    Args:
        judge: a :class:`~logitjudge.judge.Judge` (any engine, e.g. a scripted one in tests; what
            the app uses of it: :class:`~logitjudge.server.judgelike.ServedJudge`).
        max_num_batched_tokens, max_batch_requests: ``None`` = :func:`default_batching` for the judge's
            device (see :data:`CPU_BATCHING` and :data:`ACCELERATOR_BATCHING`).
        max_concurrent_batches: ``None`` = :func:`default_concurrency` for the judge's backend.
        strict_wire: answer without any ``x_`` field unless a request sends ``x_strict_wire: false``
            (:attr:`ServerConfig.strict_wire`).
        registry: the Prometheus registry to fill (default: a new one per app).

    The routes reach the app through ``app.state.server``, a
    :class:`~logitjudge.server.systemone_routes.ServerState`; its ``judge``, ``scheduler``,
    ``metrics`` and ``config`` are also ``app.state.judge`` ... ``app.state.config``.
    """
    default_tokens, default_requests = default_batching(judge)
    config = ServerConfig(
        api_keys=tuple(api_keys),
        max_queue=max_queue,
        max_num_batched_tokens=max_num_batched_tokens if max_num_batched_tokens is not None else default_tokens,
        max_batch_requests=max_batch_requests if max_batch_requests is not None else default_requests,
        max_concurrent_batches=(
            max_concurrent_batches if max_concurrent_batches is not None else default_concurrency(judge)
        ),
        max_body_bytes=max_body_bytes,
        drain_timeout=drain_timeout,
        max_questions=max_questions,
        max_items=max_items,
        max_text_chars=max_text_chars,
        strict_wire=strict_wire,
    )
    metrics = ServerMetrics(registry)
    metrics.watch_engine(judge.counters)
    scheduler = _scheduler(judge, config, metrics)
    state = ServerState(judge, scheduler, metrics, config)
    _ = state.fitted_warnings  # evaluators fitted on another model: logged at start, not on first use

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
    app.state.server = state
    app.state.judge, app.state.scheduler, app.state.metrics, app.state.config = judge, scheduler, metrics, config
    install_error_handlers(app)
    routers = (systemone_routes.router, operations, evaluate_routes.router)
    for router in routers:
        app.include_router(router)

    # Added innermost first: the last one added sees the request first.
    app.add_middleware(BodyMiddleware, max_body_bytes=config.max_body_bytes)
    app.add_middleware(BearerAuthMiddleware, keys=config.api_keys)
    # from the routers themselves: this FastAPI wraps included routers, whose routes carry no path
    known_paths = [
        path
        for routes in (app.routes, *(r.routes for r in routers))
        for route in routes
        if isinstance(path := getattr(route, "path", None), str)
    ]
    app.add_middleware(MetricsMiddleware, metrics=metrics, known_paths=known_paths)
    return app
