"""The Python API of the evaluators: ``evaluate(judge, items, evaluators=...)``.

::

    from logitjudge import Judge
    from logitjudge.rubrics.api import evaluate
    judge = Judge.load()
    run = evaluate(judge, [{"id": "a", "input": "What is the refund window?",
                            "output": "30 days.", "context": ["Refunds within 30 days."]}],
                   evaluators=["RAG"])
    run.results[0].results["chunk_relevance"].score
    run.summary["faithfulness"].value("pass_rate")

Each item is one engine request (one state, every selected evaluator's typed questions); items are
sent ``batch_size`` at a time through ``judge.answer_many``. ``evaluators="auto"`` takes each item's
own ``evaluator`` field (the labelled data sets' rows); their typed-question rows
(``generic_yesno``, ``multiple_choice``, ``rating``) run ``typed_question``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from logitjudge.contract.evaluate import EvaluateUsage, EvaluatorSummary, Item, ItemResult
from logitjudge.errors import InvalidRequestError
from logitjudge.rubrics.aggregate import DATASET_EVALUATORS, gold_of, summarize
from logitjudge.rubrics.debias import DebiasMode
from logitjudge.rubrics.items import normalize_row
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.rubrics.registry import Registry, Selected, default_registry
from logitjudge.rubrics.runner import WIRE_MODEL, ItemPlan, plan_item, run_plans

__all__ = ["EvaluationRun", "evaluate", "iter_evaluate", "to_item", "selection_for", "AUTO"]

AUTO = "auto"


class EvaluationRun(BaseModel):
    """Results of :func:`evaluate`: one :class:`ItemResult` per item, in order, and the summary.

    To a table (one row per item and evaluator) and to a JSONL file (one item per line)::

        run = evaluate(judge, items, evaluators=["RAG"])
        records = [
            {"id": item.id, "evaluator": name, "status": r.status, "score": r.score, "passed": r.passed}
            for item in run.results
            for name, r in item.results.items()
        ]
        try:
            import pandas as pd  # optional: pip install pandas
        except ImportError:
            pd = None
        if pd is not None:
            frame = pd.DataFrame.from_records(records)
            frame.pivot(index="id", columns="evaluator", values="score")  # items x evaluators
        with open("results.jsonl", "w", encoding="utf-8") as fh:
            for item in run.results:
                fh.write(item.model_dump_json(exclude_none=True) + "\\n")
        run.summary["faithfulness"].value("pass_rate")
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    results: list[ItemResult]
    summary: dict[str, EvaluatorSummary]
    usage: EvaluateUsage


def to_item(raw: Mapping[str, Any] | Item, *, index: int = 0, where: str | None = None) -> Item:
    """An :class:`Item` from a dict in our field names or RAGAS names.

    Args:
        index: the item's place in a request, named by an error ("item 3: ...").
        where: names the item in an error instead of ``index`` (a data file's "row 'b'").

    Raises:
        InvalidRequestError: a field has the wrong type (``field`` names it).
    """
    if isinstance(raw, Item):
        return raw
    try:
        return Item.model_validate(normalize_row(dict(raw)))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first.get("loc", ()))
        raise InvalidRequestError(
            f"{where or f'item {index}'}: {'.'.join(map(str, loc))}: {first.get('msg', 'invalid')}", field=loc
        ) from None


def selection_for(registry: Registry, evaluators: str | Sequence[str], item: Item) -> list[Selected]:
    """The evaluators to run on ``item``: the named ones, or with ``"auto"`` the item's own.

    Raises:
        UnknownEvaluatorError: an unknown name (or, with ``"auto"``, an unknown row evaluator).
        InvalidRequestError: ``"auto"`` and the item names no evaluator and has no question.
    """
    if isinstance(evaluators, str):
        evaluators = [evaluators]
    if list(evaluators) != [AUTO]:
        return registry.select(evaluators)
    own = (item.model_extra or {}).get("evaluator")
    if isinstance(own, str):
        return registry.select([DATASET_EVALUATORS.get(own, own)], field=("evaluator",))
    if item.question is not None:
        return registry.select(["typed_question"])
    raise InvalidRequestError(
        "evaluators='auto' needs an `evaluator` field on every item (or a typed `question`)",
        field=("evaluator",),
    )


def iter_evaluate(
    judge: JudgeLike,
    items: Iterable[Mapping[str, Any] | Item],
    evaluators: str | Sequence[str] = ("Everything",),
    *,
    model: str = WIRE_MODEL,
    thresholds: Mapping[str, float] | None = None,
    batch_size: int = 8,
    registry: Registry | None = None,
    debias: DebiasMode = "none",
) -> Iterator[tuple[Item, ItemResult]]:
    """Evaluate lazily, yielding ``(item, result)`` pairs in order as batches finish.

    Missing fields never raise here: those evaluators are ``skipped`` with a reason (the HTTP
    API's single-item form is the strict one). A fixed selection is checked before any item runs.
    ``debias="batch"``: every item is answered before the first pair is yielded
    (:func:`logitjudge.rubrics.debias.batch_calibrated`).
    """
    registry = registry or default_registry()
    fixed = (
        None
        if (isinstance(evaluators, str) and evaluators == AUTO) or list(evaluators) == [AUTO]
        else (registry.select([evaluators] if isinstance(evaluators, str) else evaluators))
    )
    pending: list[Item] = []

    def plans() -> Iterator[ItemPlan]:
        for i, raw in enumerate(items):
            item = to_item(raw, index=i)
            pending.append(item)
            yield plan_item(item, fixed or selection_for(registry, AUTO, item), strict=False)

    for result in run_plans(
        judge, plans(), model=model, thresholds=thresholds, batch_size=batch_size, registry=registry, debias=debias
    ):
        yield pending.pop(0), result


def evaluate(
    judge: JudgeLike,
    items: Iterable[Mapping[str, Any] | Item],
    evaluators: str | Sequence[str] = ("Everything",),
    *,
    model: str = WIRE_MODEL,
    thresholds: Mapping[str, float] | None = None,
    batch_size: int = 8,
    positive: Literal["passed", "failed"] = "passed",
    registry: Registry | None = None,
    debias: DebiasMode = "none",
) -> EvaluationRun:
    """Evaluate ``items`` with ``evaluators`` (names, suites, or ``"auto"``) and summarise.

    Args:
        judge: a :class:`logitjudge.Judge` (any :class:`~logitjudge.rubrics.judgelike.JudgeLike`).
        items: dicts with ``input``/``output``/``expected``/``context`` (or RAGAS names), an
            optional ``id``, and optional gold (``labels``, ``context_labels``, ``gold``).
        thresholds: per-evaluator pass thresholds overriding the defaults.
        positive: the positive class for precision/recall: ``"passed"`` or ``"failed"``.
        debias: ``"none"``, or ``"batch"`` to divide each choice/score question's prior out of
            its answers over these items (:mod:`logitjudge.rubrics.debias`).

    Raises:
        UnknownEvaluatorError: an unknown evaluator or suite name (with a did-you-mean).
        UnknownModelError: ``model`` is not served by ``judge``.
    """
    pairs = list(
        iter_evaluate(
            judge,
            items,
            evaluators,
            model=model,
            thresholds=thresholds,
            batch_size=batch_size,
            registry=registry,
            debias=debias,
        )
    )
    rows = []
    usage = EvaluateUsage()
    for item, res in pairs:
        gold = gold_of({**(item.model_extra or {}), **item.model_dump(include={"gold", "labels", "context_labels"})})
        rows.append({"results": res.model_dump(mode="json")["results"], "gold": gold.model_dump(mode="json")})
        usage = EvaluateUsage(
            input_tokens=usage.input_tokens + res.usage.input_tokens,
            output_tokens=usage.output_tokens + res.usage.output_tokens,
            requests=usage.requests + res.usage.requests,
        )
    return EvaluationRun(
        model=judge.model_name,
        results=[r for _, r in pairs],
        summary=summarize(rows, positive=positive),
        usage=usage,
    )
