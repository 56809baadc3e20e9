"""Run evaluators over items: one engine request per item, all evaluators inside it.

For each item the selected evaluators' typed questions are gathered under namespaced ids and
sent as **one** :class:`~logitjudge.engine.types.EngineRequest` over **one** state (spec B.2):
one forward pass over that state. A batch of items goes to ``judge.answer_many`` in one call
(still one request, one state per item; the engine may share forward passes between items).
Ids stay here: the typed answers come back in question order and are routed back to their
evaluator by namespace, then scored with their questions by the pure functions of
:mod:`logitjudge.rubrics.scoring`.

Contrast (``"contrast": "context"`` in an evaluator's definition, e.g. faithfulness): the
item's questions of such evaluators are also sent over the state without ``context``, as a
second request in the same ``answer_many`` call, and scored by how much the context raises
P(yes) (:func:`logitjudge.rubrics.scoring.contrast_probability`).

Missing required fields (spec B.5, B.9): an evaluator named explicitly raises
:class:`InvalidRequestError` naming the field when ``strict`` (the HTTP API); through a suite, or
when not ``strict`` (datasets), it is ``skipped`` with a reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logitjudge.contract.evaluate import EvaluateUsage, EvaluatorResult, Item, ItemResult
from logitjudge.convert import check_state, with_rotations
from logitjudge.engine.calibration import evaluator_key
from logitjudge.engine.types import EngineRequest, EngineResult, Question
from logitjudge.errors import InvalidRequestError, LogitJudgeError
from logitjudge.rubrics.debias import DEBIAS_MODES, DebiasMode, batch_calibrated
from logitjudge.rubrics.questions import build_questions
from logitjudge.rubrics.registry import Registry, Selected, default_registry
from logitjudge.rubrics.scoring import SCALED_SCORINGS, Answered, errored, score_answers, skipped

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling

__all__ = [
    "ItemPlan",
    "MissingFieldError",
    "plan_item",
    "finish_plan",
    "lowest_option_mass",
    "check_thresholds",
    "run_plans",
    "run_items",
    "DEFAULT_MODEL",
]

DEFAULT_MODEL = "jev-latest"


class MissingFieldError(InvalidRequestError):
    """An explicitly named evaluator needs a field the item lacks (-> 422 at ``loc`` of the field,
    ``type: "missing"`` as pydantic says of a missing field)."""

    error_type = "missing"
    detail_type = "missing"


@dataclass
class ItemPlan:
    """What one item sends: its state, its namespaced typed questions, and who owns which ids."""

    item: Item
    state: dict[str, Any]
    questions: dict[str, Question] = field(default_factory=dict)
    owners: list[tuple[Selected, list[str]]] = field(default_factory=list)
    early: dict[str, EvaluatorResult] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    contrast: dict[str, Question] = field(default_factory=dict)
    """The questions of evaluators with ``contrast: "context"``, asked again without ``context``."""

    def contrast_request(self, rotations: int = 1) -> EngineRequest | None:
        """The content-free twin of :meth:`request` for the contrast questions (None if none):
        the same state without ``context``, so only the evidence differs between the two."""
        if not self.contrast:
            return None
        state = {k: v for k, v in self.state.items() if k != "context"}
        check_state(state)
        return EngineRequest(state=state, questions=tuple(with_rotations(q, rotations) for q in self.contrast.values()))

    def request(self, rotations: int = 1) -> EngineRequest:
        """The one engine request of this item: its state and every question, in id order.

        Choice and score questions get ``rotations`` (the judge's ``default_rotations``, as
        ``POST /v1/systemone`` gives a request without ``x_rotations``).

        Raises:
            InvalidRequestError: the state is not valid wire Text (a lone surrogate, a
                non-finite number, nesting over 64 levels; ``field`` = ``("state", ...)``).
        """
        check_state(self.state)
        return EngineRequest(
            state=self.state, questions=tuple(with_rotations(q, rotations) for q in self.questions.values())
        )


_Responses = tuple["ItemPlan", "EngineResult | LogitJudgeError | None", "EngineResult | LogitJudgeError | None"]
"""An item's plan, the engine's response to its request and to its contrast twin (or the error)."""


def _missing_reason(fields: Sequence[str], item: Item) -> str:
    names = ", ".join(f"`{f}`" for f in fields)
    return f"missing required field{'s' if len(fields) > 1 else ''} {names}{_blank_note(fields, item)}"


def _blank_note(fields: Sequence[str], item: Item) -> str:
    """Say which of the missing ``fields`` were sent but empty or blank, so "required" does not
    read as "absent"."""
    empty = [f for f in fields if getattr(item, f) in ("", [], {})]
    blank = [f for f in fields if getattr(item, f) is not None and f not in empty]
    notes = [f"{', '.join(f'`{f}`' for f in empty)} sent empty"] if empty else []
    if blank:
        notes.append(f"{', '.join(f'`{f}`' for f in blank)} sent blank: only whitespace or invisible characters")
    return f" ({'; '.join(notes)})" if notes else ""


def plan_item(
    item: Item, selection: Sequence[Selected], *, strict: bool, field_prefix: tuple[str | int, ...] = ()
) -> ItemPlan:
    """Build the questions of every selected evaluator for ``item``.

    Args:
        field_prefix: where the item sits in the request (``("items", 3)``), for error locations.

    Raises:
        MissingFieldError: ``strict`` and an explicitly named evaluator lacks a required field.
        InvalidRequestError: ``strict`` and a context chunk is blank (``field`` = ``context[i]``);
            not ``strict``, the evaluators that read the context get an ``error`` result instead.
        InvalidRequestError: ``strict`` and the item's typed question is invalid.
    """
    plan = ItemPlan(item=item, state=item.state())
    blank = item.blank_chunks()
    if blank and strict:
        raise InvalidRequestError(
            f"context[{blank[0]}]: the chunk is blank (only whitespace or invisible characters); "
            "a blank chunk is never evidence (remove it, or send no context)",
            field=(*field_prefix, "context", blank[0]),
        )
    for sel in selection:
        defn = sel.definition
        plan.order.append(defn.name)
        if blank and "context" in (*defn.required, *defn.optional):
            plan.early[defn.name] = errored(
                defn,
                f"context[{blank[0]}] is blank (only whitespace or invisible characters); "
                "a blank chunk is never evidence",
            )
            continue
        missing = [f for f in defn.required if not item.has(f)]
        if missing:
            if strict and sel.explicit:
                raise MissingFieldError(
                    f"Field required: evaluator {defn.name!r} needs `{missing[0]}`{_blank_note(missing[:1], item)}",
                    field=(*field_prefix, missing[0]),
                )
            plan.early[defn.name] = skipped(defn, _missing_reason(missing, item))
            continue
        try:
            qs = build_questions(defn, item, field=(*field_prefix, "question"))
        except InvalidRequestError as exc:
            if strict:
                raise
            plan.early[defn.name] = errored(defn, exc.message)
            continue
        plan.questions.update(qs)
        plan.owners.append((sel, list(qs)))
        if defn.contrast == "context":
            plan.contrast.update(qs)
    return plan


def check_thresholds(registry: Registry, thresholds: Mapping[str, float] | None) -> dict[str, float]:
    """Validate per-evaluator threshold overrides (known names, values in [0, 1]).

    Raises:
        UnknownEvaluatorError: a key is not an evaluator (``field`` = ``("thresholds", key)``).
        InvalidRequestError: a value is outside [0, 1].
    """
    out: dict[str, float] = {}
    for name, value in (thresholds or {}).items():
        if name not in registry.evaluators:
            raise registry.unknown(name, field=("thresholds", name))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise InvalidRequestError(
                f"thresholds.{name}: Input should be a number between 0 and 1", field=("thresholds", name)
            )
        out[name] = float(value)
    return out


def lowest_option_mass(answered: Sequence[Answered]) -> float | None:
    """The lowest option mass of an evaluator's answers (None when it has no answer).

    One figure per evaluator result: a per-chunk evaluator is as weak as its weakest chunk's
    answer, and a low mass is what a reader must be warned about
    (:data:`logitjudge.settings.LOW_OPTION_MASS`).
    """
    masses = [float(a.answer.option_mass) for a in answered]
    return min(masses) if masses else None


def finish_plan(
    plan: ItemPlan,
    response: EngineResult | LogitJudgeError | None,
    thresholds: Mapping[str, float],
    contrast: EngineResult | LogitJudgeError | None = None,
    scalings: Mapping[str, Scaling] | None = None,
) -> ItemResult:
    """Score the engine's answers to ``plan``'s request into the item's result.

    ``response`` is the item's :class:`EngineResult` (answers in the order of
    ``plan.questions``), the error that request alone raised (its evaluators are ``error``), or
    None when the item made no engine call. ``contrast`` is the answer to
    :meth:`ItemPlan.contrast_request` (or its error: the contrast evaluators are ``error``).
    ``scalings``: the calibration's scaling of each evaluator's score, by
    ``"<name>@<version>"`` (``Judge.evaluator_scalings``), for the ``probability`` and
    ``rubric`` evaluators it names.
    """
    results: dict[str, EvaluatorResult] = dict(plan.early)
    usage = EvaluateUsage()
    if isinstance(response, LogitJudgeError):
        for sel, _ in plan.owners:
            results[sel.name] = errored(sel.definition, f"{type(response).__name__}: {response.message}")
    elif response is not None:
        usage = EvaluateUsage(
            input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens, requests=1
        )
        by_id = {qid: Answered(q, a) for (qid, q), a in zip(plan.questions.items(), response.answers, strict=True)}
        base_id: dict[str, Answered] = {}
        if isinstance(contrast, EngineResult):
            usage = EvaluateUsage(
                input_tokens=usage.input_tokens + contrast.usage.input_tokens,
                output_tokens=usage.output_tokens + contrast.usage.output_tokens,
                requests=usage.requests + 1,
            )
            base_id = {qid: Answered(q, a) for (qid, q), a in zip(plan.contrast.items(), contrast.answers, strict=True)}
        for sel, ids in plan.owners:
            defn = sel.definition
            own = [by_id[i] for i in ids]
            baseline = None
            if defn.contrast is not None:
                if not isinstance(contrast, EngineResult):
                    why = "no answer" if contrast is None else f"{type(contrast).__name__}: {contrast.message}"
                    results[defn.name] = errored(defn, f"the request without `context` failed: {why}")
                    continue
                baseline = [base_id[i] for i in ids]
            try:
                scaling = None
                if defn.scoring in SCALED_SCORINGS:  # the scorings with a score scaling
                    scaling = (scalings or {}).get(evaluator_key(defn.name, defn.version))
                scored = score_answers(defn, own, thresholds.get(defn.name), baseline, scaling)
            except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as exc:  # answer unlike question
                results[defn.name] = errored(defn, f"could not score the answers: {exc!r}")
                continue
            mass = lowest_option_mass([*own, *(baseline or ())])
            results[defn.name] = scored if mass is None else scored.model_copy(update={"x_option_mass": mass})
    ordered = {name: results[name] for name in plan.order}
    verdicts = [r.passed for r in ordered.values() if r.status == "ok" and r.passed is not None]
    return ItemResult(id=plan.item.id, results=ordered, passed=all(verdicts) if verdicts else None, usage=usage)


def run_plans(
    judge: Any,
    plans: Iterable[ItemPlan],
    *,
    model: str = DEFAULT_MODEL,
    thresholds: Mapping[str, float] | None = None,
    strict: bool = False,
    batch_size: int = 8,
    registry: Registry | None = None,
    debias: DebiasMode = "none",
    debias_report: dict[str, int] | None = None,
) -> Iterator[ItemResult]:
    """Send planned items to the judge and yield one :class:`ItemResult` per item, in order.

    Each batch is one ``judge.answer_many`` call with one :class:`EngineRequest` per item, plus
    its content-free twin when an evaluator has ``contrast`` (:meth:`ItemPlan.contrast_request`; with
    the judge's ``default_rotations``). An error on one item (its state is over the token budget,
    or not valid Text) marks that item's evaluators ``error`` and never stops the others, unless
    ``strict`` and a batch of one, when the error is raised (the HTTP single-item form maps it to
    413 etc.). Items with no runnable evaluator make no engine call.

    ``debias="batch"`` holds every answer until the last item, divides each typed choice/score
    question's prior out of its answers (:func:`logitjudge.rubrics.debias.batch_calibrated`),
    then scores; its counts go into ``debias_report`` when given.

    Raises:
        UnknownModelError: ``model`` is not served by ``judge`` (checked before any work).
        UnknownEvaluatorError, InvalidRequestError: a bad ``thresholds`` entry.
    """
    registry = registry or default_registry()
    checked = check_thresholds(registry, thresholds)
    check = getattr(judge, "check_model", None)  # a stand-in judge without it serves every name
    if check is not None:
        check(model)
    if debias not in DEBIAS_MODES:
        raise InvalidRequestError(f"debias: one of {', '.join(DEBIAS_MODES)}, not {debias!r}", field=("debias",))
    rotations = int(getattr(judge, "default_rotations", 1))
    scalings = dict(getattr(judge, "evaluator_scalings", None) or {})  # a stand-in judge may have none
    batch: list[ItemPlan] = []

    def flush() -> Iterator[_Responses]:
        # keys: (id(plan), False) for the item's request, (id(plan), True) for its contrast twin
        by_plan: dict[tuple[int, bool], EngineResult | LogitJudgeError] = {}
        sent: list[tuple[tuple[int, bool], EngineRequest]] = []
        for p in batch:
            if not p.questions:
                continue
            try:
                sent.append(((id(p), False), p.request(rotations)))
                twin = p.contrast_request(rotations)
                if twin is not None:
                    sent.append(((id(p), True), twin))
            except InvalidRequestError as exc:
                by_plan[(id(p), False)] = exc
        if sent:
            results = judge.answer_many([req for _, req in sent])
            by_plan.update(zip((key for key, _ in sent), results, strict=True))
        if strict and len(batch) == 1:
            for twin_key in (False, True):
                if isinstance(error := by_plan.get((id(batch[0]), twin_key)), LogitJudgeError):
                    raise error
        for p in batch:
            yield p, by_plan.get((id(p), False)), by_plan.get((id(p), True))
        batch.clear()

    def answered() -> Iterator[_Responses]:
        for plan in plans:
            batch.append(plan)
            if len(batch) >= max(1, batch_size):
                yield from flush()
        if batch:
            yield from flush()

    done: Iterable[_Responses] = answered()
    if debias == "batch":
        done, counts = debiased(list(done))
        if debias_report is not None:
            debias_report.update(counts)
    for p, response, twin in done:
        yield finish_plan(p, response, checked, twin, scalings)


def debiased(answered: Sequence[_Responses]) -> tuple[list[_Responses], dict[str, int]]:
    """Every item's responses with the typed choice/score questions batch-calibrated over all
    of them (:func:`logitjudge.rubrics.debias.batch_calibrated`), and its counts."""
    held = [((p, twin), _typed_questions(p), response) for p, response, twin in answered]
    adjusted, counts = batch_calibrated(held)
    return [(p, response, twin) for (p, twin), _, response in adjusted], counts  # type: ignore[misc]


def _typed_questions(plan: ItemPlan) -> list[Question | None]:
    """The plan's questions in request order, None for those the ``typed_question`` evaluator
    does not own (the evaluators' rubric questions are never batch-calibrated)."""
    typed = {i for sel, ids in plan.owners if sel.definition.scoring == "typed_question" for i in ids}
    return [q if qid in typed else None for qid, q in plan.questions.items()]


def run_items(
    judge: Any,
    items: Iterable[Item],
    selection: Sequence[Selected],
    *,
    model: str = DEFAULT_MODEL,
    thresholds: Mapping[str, float] | None = None,
    strict: bool = False,
    batch_size: int = 8,
    registry: Registry | None = None,
) -> Iterator[ItemResult]:
    """Plan and run ``items`` lazily (see :func:`plan_item` and :func:`run_plans`)."""
    plans = (plan_item(item, selection, strict=strict) for item in items)
    yield from run_plans(
        judge,
        plans,
        model=model,
        thresholds=thresholds,
        strict=strict,
        batch_size=batch_size,
        registry=registry,
    )
