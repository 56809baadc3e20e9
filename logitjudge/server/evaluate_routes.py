"""``POST /api/v1/evaluate``: the evaluator API (spec Part B) over the same judge as System One.

Two forms on one route (spec B.1, B.8):

- flat: ``{"evaluators": ["RAG"], "input": ..., "output": ..., "expected": ..., "context": [...]}``
  -> ``{"model", "id", "results": {name: result}, "passed", "usage"}``;
- batch: ``{"evaluators": [...], "items": [{"id": ..., "input": ...}, ...]}``
  -> ``{"model", "results": [{"id", "results", "passed", "usage"}, ...], "summary", "usage"}``.

Each item is **one** typed :class:`~logitjudge.engine.types.EngineRequest`: one state, every
selected evaluator's questions (ids namespaced like ``chunk_relevance.3``, kept on the rubric
side), answered by :meth:`~logitjudge.server.systemone_routes.ServerState.answer_engine`, the
engine step of ``POST /v1/systemone`` (the app's batching scheduler; on an app without one, the
judge in a worker thread). No wire body is built on the way.

The route reads like the request's path: parse (FastAPI, into :class:`EvaluateRequest`) ->
validate (:func:`_plan`: the model, the limits, the evaluators and their fields) -> one call per
item into the state -> the response.

Errors (spec B.9), as 422 ``detail[]`` through the app's handler table
(``logitjudge.server.errors``): an unknown evaluator or suite -> ``loc ["body","evaluators",i]``
with a did-you-mean; an evaluator named explicitly whose field is missing -> ``loc
["body","<field>"]`` (``["body","items",j,"<field>"]`` in a batch), ``type: "missing"``; through a
suite it is ``skipped`` with a reason instead. An unknown model -> 400; over the token budget ->
413 in the flat form, a per-item ``error`` result in a batch.

With ``x_strict_wire: true`` in the body, or on a server started with ``--strict-wire``, the
response carries no ``x_`` field (:func:`~logitjudge.contract.extensions.strict_dump`).

This module imports no torch.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from pydantic import Field

from logitjudge.contract.evaluate import (
    EvaluateBatchResponse,
    EvaluateResponse,
    EvaluateUsage,
    Item,
    ItemResult,
)
from logitjudge.contract.extensions import strict_dump
from logitjudge.errors import InvalidRequestError, LogitJudgeError
from logitjudge.rubrics.aggregate import gold_of, summarize
from logitjudge.rubrics.debias import MIN_BATCH, DebiasMode
from logitjudge.rubrics.definitions import ITEM_FIELDS
from logitjudge.rubrics.head_plan import with_head_fallbacks
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.runner import (
    WIRE_MODEL,
    ItemPlan,
    Response,
    check_thresholds,
    debiased,
    finish_plan,
    plan_item,
)
from logitjudge.server.errors import ERROR_RESPONSES
from logitjudge.server.judgelike import ServedJudge
from logitjudge.server.limits import RequestLimits, check_evaluate, check_questions_per_item
from logitjudge.server.systemone_routes import ServerState, State, describe

__all__ = ["router", "include_evaluate_routes", "EvaluateRequest", "MAX_ITEMS"]

MAX_ITEMS = RequestLimits.max_items
"""Default most items in one batch request (``max_items``, configurable on the app); larger
datasets belong to ``logitjudge evaluate``."""

MAX_IN_FLIGHT = 16
"""Items of one batch queued on the scheduler at once (its queue is shared with other clients)."""

Threshold = Annotated[float, Field(ge=0.0, le=1.0)]


class EvaluateRequest(Item):
    """Body of ``POST /api/v1/evaluate`` (the item fields are the flat form's data)."""

    evaluators: Annotated[list[str], Field(min_length=1)]
    model: str = WIRE_MODEL
    thresholds: dict[str, Threshold] | None = None
    items: Annotated[list[Item], Field(min_length=1)] | None = None
    positive: Literal["passed", "failed"] = "passed"
    concurrency: int | None = Field(default=None, description="accepted for compatibility; the scheduler batches")
    x_debias: DebiasMode = Field(
        default="none",
        description="extension, batch form only: `batch` divides each typed choice/score question's prior "
        f"(its mean answer over the items asking it, at least {MIN_BATCH}) out of its answers (batch calibration)",
    )
    x_strict_wire: bool | None = Field(
        default=None,
        description="extension: true = the response carries no `x_` field (for clients that validate "
        "against a closed schema); false = it carries them; absent = the server's setting (`--strict-wire`)",
    )


router = APIRouter(tags=["Evaluators"])


def _plan(body: EvaluateRequest, state: ServerState) -> tuple[list[ItemPlan], bool]:
    """Validate ``body`` and plan its items; True when it is the batch form.

    Raises:
        UnknownModelError: ``model`` is not served here (400).
        InvalidRequestError: over a limit, flat fields beside ``items``, a blank context chunk, an
            invalid typed question (422); its subclasses ``UnknownEvaluatorError`` (an unknown
            evaluator, suite or threshold key, with a did-you-mean) and ``MissingFieldError`` (an
            evaluator named explicitly lacks a field).
    """
    state.judge.check_model(body.model)
    check_evaluate(body, ITEM_FIELDS, state.limits)  # items per batch, string lengths: 422 naming the limit
    registry = default_registry()
    selection = registry.select(body.evaluators)
    check_thresholds(registry, body.thresholds)
    if body.items is None:
        if body.x_debias != "none":
            raise InvalidRequestError(
                "x_debias: batch calibration divides a question's prior over many items; send them as `items`",
                field=("x_debias",),
            )
        plans, batch = [plan_item(body, selection, strict=True)], False
    else:
        flat = [f for f in ITEM_FIELDS if getattr(body, f) is not None]
        if flat:
            raise InvalidRequestError(
                f"send either `items` or the flat fields, not both (got {', '.join(flat)} beside items)",
                field=("items",),
            )
        plans = [
            plan_item(item, selection, strict=True, field_prefix=("items", j)) for j, item in enumerate(body.items)
        ]
        batch = True
    engine = describe(state.judge)
    plans = [with_head_fallbacks(p, registry, engine) for p in plans]  # before the limits count them
    check_questions_per_item([p.n_questions() for p in plans], batch, state.limits)
    return plans, batch


Answers = dict[str, Response]
"""The engine's response to each of an item's requests, by group key (:meth:`ItemPlan.engine_requests`)."""


async def _answer(state: ServerState, plan: ItemPlan, *, raise_errors: bool) -> Answers:
    """The item's engine requests (:meth:`ItemPlan.engine_requests`: the whole item, its twin
    without ``context`` for evaluators with contrast, each chunk alone, ...), submitted together;
    ``{}`` when no evaluator of the item asks the engine anything.

    Raises:
        InvalidRequestError: a state is not valid Text (a lone surrogate, ...).
        LogitJudgeError: ``raise_errors`` and the engine refused a request (over budget,
            overloaded, ...); otherwise the error is returned in its place.
    """
    keyed = plan.engine_requests(state.judge.default_rotations)
    got = await asyncio.gather(*(state.answer_engine(r) for _, r in keyed), return_exceptions=True)
    out: Answers = {}
    for (key, _), g in zip(keyed, got, strict=True):
        if isinstance(g, LogitJudgeError):
            if raise_errors:
                raise g
            out[key] = g
        elif isinstance(g, BaseException):
            raise g
        else:
            out[key] = g
    return out


def _sum_usage(results: list[ItemResult]) -> EvaluateUsage:
    return EvaluateUsage(
        input_tokens=sum(r.usage.input_tokens for r in results),
        output_tokens=sum(r.usage.output_tokens for r in results),
        requests=sum(r.usage.requests for r in results),
    )


@router.post(
    "/api/v1/evaluate",
    summary="Run evaluators (or suites) on one item or a batch",
    response_model=EvaluateResponse | EvaluateBatchResponse,
    response_description="the flat form: `EvaluateResponse`; the batch form (`items`): `EvaluateBatchResponse`",
    responses=ERROR_RESPONSES,
)
async def evaluate_route(body: EvaluateRequest, state: State) -> JSONResponse:
    """Score ``input``/``output``/``expected``/``context`` with the named evaluators and suites.

    All questions of all selected evaluators for one item are answered in one engine request
    over one state. Numbers are finite; an undetermined value is null with a ``reason``.
    """
    # The body is built here (a JSONResponse, per item and evaluator without null fields), so
    # FastAPI does not re-serialise it: response_model only declares it in the OpenAPI schema, and
    # tests/server/test_evaluate_response_models.py validates real responses against it.
    plans, batch = _plan(body, state)
    thresholds = dict(body.thresholds or {})
    strict = state.strict_wire(body.x_strict_wire)

    def dump(result: ItemResult) -> dict[str, Any]:
        return strict_dump(result) if strict else result.model_dump(mode="json", exclude_none=True)

    if not batch:
        (plan,) = plans
        try:
            responses = await _answer(state, plan, raise_errors=True)
        except InvalidRequestError as exc:  # the engine refused a generated question: not a body field
            raise InvalidRequestError(exc.message, field=()) from None
        result = finish_plan(
            plan, responses, thresholds, scalings=state.judge.evaluator_scalings, warnings=state.fitted_warnings
        )
        return JSONResponse({"model": state.judge.model_name, **dump(result)}, headers={"cache-control": "no-store"})

    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    scalings = state.judge.evaluator_scalings

    async def one(plan: ItemPlan) -> tuple[ItemPlan, Answers]:
        async with gate:
            try:
                responses = await _answer(state, plan, raise_errors=False)
            except LogitJudgeError as exc:
                responses = {key: exc for key, _ in plan.engine_requests(state.judge.default_rotations)}
        return plan, responses

    answered = list(await asyncio.gather(*(one(p) for p in plans)))
    extra: dict[str, Any] = {}
    if body.x_debias == "batch":
        answered, counts = debiased(answered)
        if not strict:  # the adjustment is made either way; only its report is an extension
            extra["x_debias"] = {"mode": "batch", **counts}
    warnings = state.fitted_warnings
    results = [finish_plan(p, responses, thresholds, scalings=scalings, warnings=warnings) for p, responses in answered]
    rows = [
        {
            "results": r.model_dump(mode="json")["results"],
            "gold": gold_of(item.model_dump()).model_dump(mode="json"),
        }
        for item, r in zip(body.items or [], results, strict=True)
    ]
    summary = summarize(rows, positive=body.positive)
    return JSONResponse(
        {
            "model": state.judge.model_name,
            "results": [dump(r) for r in results],
            "summary": {k: v.model_dump(mode="json") for k, v in summary.items()},
            "usage": _sum_usage(results).model_dump(),
            **extra,
        }
    )


def include_evaluate_routes(app: FastAPI, judge: ServedJudge) -> None:
    """Mount ``POST /api/v1/evaluate`` on ``app`` serving ``judge``.

    The app must carry the error handler table (``logitjudge.server.errors.install_error_handlers``),
    as ``create_app`` does; an app without a :class:`ServerState` (``app.state.server``) gets one
    for ``judge`` here, without a scheduler (items then run on the judge in a worker thread).
    """
    if getattr(app.state, "server", None) is None:
        app.state.server = ServerState(judge)
    app.include_router(router)
