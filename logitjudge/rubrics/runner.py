"""Run evaluators over items: one engine request per item, all evaluators inside it.

For each item the selected evaluators' typed questions are gathered under namespaced ids and
sent as **one** :class:`~logitjudge.engine.types.EngineRequest` over **one** state (spec B.2):
one forward pass over that state. A batch of items goes to ``judge.answer_many`` in one call
(still one request, one state per item; the engine may share forward passes between items).
Keys stay here: the typed answers come back in question order and are routed back to their
evaluator by the typed key its scoring kind asked each question under
(:class:`~logitjudge.rubrics.questions.QuestionKey`), then scored by that kind
(:func:`logitjudge.rubrics.scoring.score_evaluator`).

Contrast (``"contrast": "context"`` in an evaluator's definition, e.g. faithfulness): the
item's questions of such evaluators are also sent over the state without ``context``, as a
second request in the same ``answer_many`` call, and scored by how much the context raises
P(yes) (:func:`logitjudge.rubrics.scoring.contrast_probability`).

Missing required fields (spec B.5, B.9): an evaluator named explicitly raises
:class:`InvalidRequestError` naming the field when ``strict`` (the HTTP API); through a suite, or
when not ``strict`` (datasets), it is ``skipped`` with a reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logitjudge.contract.evaluate import EvaluateUsage, EvaluatorResult, Item, ItemResult
from logitjudge.contract.systemone import MODEL_ALIASES
from logitjudge.convert import check_state, with_rotations
from logitjudge.engine.calibration import evaluator_key
from logitjudge.engine.question_types import question_type
from logitjudge.engine.types import EngineRequest, EngineResult, Question
from logitjudge.errors import InvalidRequestError, LogitJudgeError
from logitjudge.rubrics.debias import DEBIAS_MODES, DebiasMode, batch_calibrated
from logitjudge.rubrics.head_plan import with_head_fallbacks
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.rubrics.kinds import kind_of
from logitjudge.rubrics.questions import MAIN_GROUP, Group, Planned, QuestionKey, support_claims
from logitjudge.rubrics.registry import Registry, Selected, default_registry
from logitjudge.rubrics.results import located_claims
from logitjudge.rubrics.scoring import Answered, errored, score_evaluator, skipped

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.rubrics.definitions import EvaluatorDef

__all__ = [
    "ItemPlan",
    "MissingFieldError",
    "plan_item",
    "finish_plan",
    "fitted_warning",
    "fitted_warnings",
    "lowest_option_mass",
    "check_thresholds",
    "run_plans",
    "WIRE_MODEL",
]

logger = logging.getLogger("logitjudge.rubrics")

WIRE_MODEL = MODEL_ALIASES[0]
"""The ``model`` an evaluate request names by default: ``jev-latest``, the wire alias every judge
answers to (:data:`~logitjudge.contract.systemone.MODEL_ALIASES`), not a model."""


class MissingFieldError(InvalidRequestError):
    """An explicitly named evaluator needs a field the item lacks (-> 422 at ``loc`` of the field,
    ``type: "missing"`` as pydantic says of a missing field)."""

    error_type = "missing"
    detail_type = "missing"


@dataclass
class ItemPlan:
    """What one item sends: its state, its typed questions by key, and who owns which keys."""

    item: Item
    state: dict[str, Any]
    questions: dict[QuestionKey, Question] = field(default_factory=dict)
    owners: list[tuple[Selected, list[QuestionKey]]] = field(default_factory=list)
    early: dict[str, EvaluatorResult] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    contrast: dict[QuestionKey, Question] = field(default_factory=dict)
    """The questions of evaluators with ``contrast: "context"``, asked again without ``context``."""
    groups: dict[str, Group] = field(default_factory=dict)
    """Questions not asked over the whole item, by group (:class:`~logitjudge.rubrics.questions.Planned`):
    each chunk alone, a content-free chunk, or a state of some fields only."""
    notes: dict[str, str] = field(default_factory=dict)
    """An ``x_warning`` per evaluator name from planning (a head-read evaluator answered by its
    fallback version: :func:`~logitjudge.rubrics.head_plan.with_head_fallbacks`)."""

    def add(self, sel: Selected, planned: Planned) -> None:
        """Take ``sel``'s questions (its kind's :meth:`~logitjudge.rubrics.kinds.base.ScoringKind.questions`):
        those over the whole item into :attr:`questions` (and :attr:`contrast` with ``contrast``),
        the others into their :attr:`groups`."""
        self.questions.update(planned.item)
        if sel.definition.contrast == "context":
            self.contrast.update(planned.item)
        for key, (state, qs) in planned.groups.items():
            self.groups.setdefault(key, (state, {}))[1].update(qs)
        self.owners.append((sel, planned.keys()))

    def drop(self, keys: Sequence[QuestionKey]) -> None:
        """Remove the questions under ``keys`` (and groups left empty)."""
        for key in keys:
            self.questions.pop(key, None)
            self.contrast.pop(key, None)
        for group in list(self.groups):
            qs = self.groups[group][1]
            for key in keys:
                qs.pop(key, None)
            if not qs:
                del self.groups[group]

    def n_questions(self) -> int:
        """Questions this item asks over all its requests (a contrast twin's copies not counted)."""
        return len(self.questions) + sum(len(qs) for _, qs in self.groups.values())

    def engine_requests(self, rotations: int = 1) -> list[tuple[str, EngineRequest]]:
        """Every engine request of this item, keyed by group: the whole item (:data:`MAIN_GROUP`,
        :meth:`request`), its twin without ``context`` (:data:`CONTRAST_GROUP`,
        :meth:`contrast_request`), then each of :attr:`groups` (in order of first use). The
        runner and the HTTP route both send exactly these, in one batch.

        Raises:
            InvalidRequestError: a state is not valid wire Text.
        """
        out: list[tuple[str, EngineRequest]] = []
        if self.questions:
            out.append((MAIN_GROUP, self.request(rotations)))
        twin = self.contrast_request(rotations)
        if twin is not None:
            out.append((CONTRAST_GROUP, twin))
        for key, (state, qs) in self.groups.items():
            if qs:
                check_state(state)
                out.append(
                    (
                        key,
                        EngineRequest(state=state, questions=tuple(with_rotations(q, rotations) for q in qs.values())),
                    )
                )
        return out

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


CONTRAST_GROUP = "nocontext"
"""The key of the contrast twin's request (the whole item without ``context``)."""

Response = EngineResult | LogitJudgeError | None
"""One engine request's answer, the error it raised, or None (not asked)."""

_Responses = tuple["ItemPlan", dict[str, Response]]
"""An item's plan and the engine's response to each of its requests, by group key."""


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
            planned = kind_of(defn).questions(defn, item, field=(*field_prefix, "question"))
        except InvalidRequestError as exc:
            if strict:
                raise
            plan.early[defn.name] = errored(defn, exc.message)
            continue
        plan.add(sel, planned)
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


@dataclass
class _Collected:
    """An item's answers by key, and why the questions without one have none."""

    answers: dict[QuestionKey, Answered] = field(default_factory=dict)
    twin: dict[QuestionKey, Answered] = field(default_factory=dict)
    """The contrast questions' answers over the state without ``context``."""
    failed: dict[QuestionKey, str] = field(default_factory=dict)
    twin_failed: dict[QuestionKey, str] = field(default_factory=dict)


def _collect(plan: ItemPlan, responses: Mapping[str, Response]) -> tuple[_Collected, EvaluateUsage]:
    """Route each request's answers back to their keys (in question order), and count the usage."""
    got = _Collected()
    questions: dict[str, dict[QuestionKey, Question]] = {MAIN_GROUP: plan.questions, CONTRAST_GROUP: plan.contrast}
    questions.update({key: qs for key, (_, qs) in plan.groups.items()})
    tokens = outputs = requests = 0
    for key, qs in questions.items():
        response = responses.get(key)
        answers, failed = (got.twin, got.twin_failed) if key == CONTRAST_GROUP else (got.answers, got.failed)
        if isinstance(response, EngineResult):
            tokens, outputs = tokens + response.usage.input_tokens, outputs + response.usage.output_tokens
            requests += 1
            answers.update({k: Answered(q, a) for (k, q), a in zip(qs.items(), response.answers, strict=True)})
        elif qs:
            why = "no answer" if response is None else f"{type(response).__name__}: {response.message}"
            if key == CONTRAST_GROUP:
                why = f"the request without `context` failed: {why}"
            failed.update({k: why for k in qs})
    return got, EvaluateUsage(input_tokens=tokens, output_tokens=outputs, requests=requests)


def finish_plan(
    plan: ItemPlan,
    response: Response | Mapping[str, Response],
    thresholds: Mapping[str, float],
    contrast: Response = None,
    scalings: Mapping[str, Scaling] | None = None,
    warnings: Mapping[str, str] | None = None,
) -> ItemResult:
    """Score the engine's answers to ``plan``'s requests into the item's result.

    ``response``: the responses to :meth:`ItemPlan.engine_requests` by group key (each an
    :class:`EngineResult`, the error that request alone raised, or absent when not asked), or,
    for the whole-item request alone, that one response (and ``contrast``: the answer to
    :meth:`ItemPlan.contrast_request`). An evaluator whose request failed is ``error``.
    ``scalings``: the calibration's scaling of each evaluator's score, by
    ``"<name>@<version>"`` (``Judge.evaluator_scalings``), for the ``probability`` and
    ``rubric`` evaluators it names. ``warnings``: a result's ``x_warning`` by
    ``"<name>@<version>"`` (:func:`fitted_warning`).
    """
    responses: dict[str, Response] = (
        dict(response) if isinstance(response, Mapping) else {MAIN_GROUP: response, CONTRAST_GROUP: contrast}
    )
    results: dict[str, EvaluatorResult] = dict(plan.early)
    got, usage = _collect(plan, responses)
    for sel, keys in plan.owners:
        defn = sel.definition
        twin = defn.contrast is not None
        missing = [got.failed[k] for k in keys if k in got.failed]
        missing += [got.twin_failed[k] for k in keys if twin and k in got.twin_failed]
        if missing:
            results[defn.name] = errored(defn, missing[0])
            continue
        own = {k: got.answers[k] for k in keys}
        try:
            baseline = {k: got.twin[k] for k in keys} if twin else None
            scaling = None
            head_read = any(a.answer.label_probabilities is not None for a in own.values())
            adapted = any(a.question.adapter is not None for a in own.values())
            if kind_of(defn).scaled and not head_read and not adapted:  # fitted on the base readout
                scaling = (scalings or {}).get(evaluator_key(defn.name, defn.version))
            scored = score_evaluator(defn, own, thresholds.get(defn.name), plan.item, baseline, scaling)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as exc:  # answer unlike question
            results[defn.name] = errored(defn, f"could not score the answers: {exc!r}")
            continue
        answered = [*own.values(), *(baseline or {}).values()]
        mass = lowest_option_mass([a for a in answered if not question_type(a.question.type).likelihood])
        extra: dict[str, Any] = {} if mass is None else {"x_option_mass": mass}
        said = [plan.notes.get(defn.name), (warnings or {}).get(evaluator_key(defn.name, defn.version))]
        warning = " ".join(w for w in said if w) or None
        if warning is not None and scored.status == "ok":
            extra["x_warning"] = warning
        results[defn.name] = scored.model_copy(update=extra) if extra else scored
    located(plan, got, results)
    ordered = {name: results[name] for name in plan.order}
    verdicts = [r.passed for r in ordered.values() if r.status == "ok" and r.passed is not None]
    return ItemResult(id=plan.item.id, results=ordered, passed=all(verdicts) if verdicts else None, usage=usage)


def located(plan: ItemPlan, got: _Collected, results: dict[str, EvaluatorResult]) -> None:
    """Give each ok result of an evaluator with ``locate`` its located verdicts (``x_located``, in
    place; ``passed`` of a row against the result's threshold), when
    the evaluator it names ran on the item as a ``chunk_head`` version (read by its head or an
    adapter; not its fallback) and answered per chunk and claim
    (:func:`~logitjudge.rubrics.results.located_claims`)."""
    defs = {sel.definition.name: sel.definition for sel, _ in plan.owners}
    for name, defn in defs.items():
        target = defs.get(defn.locate or "")
        result = results.get(name)
        if target is None or target.scoring != "chunk_head" or result is None or result.status != "ok":
            continue
        if results[target.name].status != "ok":
            continue
        cells = {
            (k.chunk, k.claim): a.probabilities()
            for k, a in got.answers.items()
            if k.evaluator == target.name and k.chunk is not None and k.claim is not None
        }
        threshold = result.threshold if result.threshold is not None else defn.threshold
        rows = located_claims(support_claims(plan.item), cells, threshold)
        update = {"x_located": rows, "x_located_by": f"{target.name}@{target.version}"}
        results[name] = result.model_copy(update=update)


def fitted_warning(defn: EvaluatorDef, engine: Mapping[str, Any], registry: Registry | None = None) -> str | None:
    """The ``x_warning`` of ``defn``'s results on ``engine`` (a ``describe()`` dict): set when
    its fitted coefficients were fitted on another engine
    (:meth:`~logitjudge.rubrics.definitions.FittedFor.differs_from`), else None. With
    ``registry``, the warning names the latest version of the same evaluator that has no fitted
    coefficients and reads no trained head (e.g. ``answer_relevancy@1``; a version reading a head
    answers with its fallback where the head is missing), when there is one."""
    fitted = defn.fitted_for
    why = None if fitted is None else fitted.differs_from(engine)
    if fitted is None or why is None:
        return None
    plain = [
        d.version
        for d in (registry.versions.values() if registry is not None else ())
        if d.name == defn.name and d.fitted_for is None and d.head is None
    ]
    latest = max(plain, key=lambda v: tuple(map(int, v.split(".")))) if plain else None  # "10" after "9"
    instead = (
        f"select {defn.name}@{latest}, which has none" if latest else "select a version without fitted coefficients"
    )
    return (
        f"{defn.name}@{defn.version}'s coefficients were fitted on {fitted.model!r} "
        f"({fitted.prompt_version}) and {why}: they may not fit its features. Refit them "
        f"for this model, or {instead} (docs/reference/evaluators.md, 'Fitted for one model')."
    )


def fitted_warnings(registry: Registry, engine: Mapping[str, Any]) -> dict[str, str]:
    """:func:`fitted_warning` of every version in ``registry`` that has one on ``engine``, by
    ``"<name>@<version>"`` (what :func:`finish_plan` takes as ``warnings``)."""
    found = {key: fitted_warning(defn, engine, registry) for key, defn in registry.versions.items()}
    return {key: w for key, w in found.items() if w is not None}


def run_plans(
    judge: JudgeLike,
    plans: Iterable[ItemPlan],
    *,
    model: str = WIRE_MODEL,
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
    judge.check_model(model)
    if debias not in DEBIAS_MODES:
        raise InvalidRequestError(f"debias: one of {', '.join(DEBIAS_MODES)}, not {debias!r}", field=("debias",))
    rotations = judge.default_rotations
    scalings = dict(judge.evaluator_scalings)
    engine = judge.describe()
    warnings = fitted_warnings(registry, engine)  # "<name>@<version>" -> x_warning
    logged: set[str] = set()  # each warning is logged once per call, when a result carries it
    seen: set[str] = set()  # evaluator versions already checked for a warning
    batch: list[ItemPlan] = []

    def flush() -> Iterator[_Responses]:
        by_plan: dict[tuple[int, str], Response] = {}
        sent: list[tuple[tuple[int, str], EngineRequest]] = []
        for p in batch:
            try:
                sent += [((id(p), key), req) for key, req in p.engine_requests(rotations)]
            except InvalidRequestError as exc:
                by_plan[(id(p), MAIN_GROUP)] = exc
                by_plan.update({(id(p), key): exc for key in p.groups})
                by_plan[(id(p), CONTRAST_GROUP)] = exc
        if sent:
            results = judge.answer_many([req for _, req in sent])
            by_plan.update(zip((key for key, _ in sent), results, strict=True))
        if strict and len(batch) == 1:
            for (_, _key), got in by_plan.items():
                if isinstance(got, LogitJudgeError):
                    raise got
        for p in batch:
            yield p, {key: got for (pid, key), got in by_plan.items() if pid == id(p)}
        batch.clear()

    def answered() -> Iterator[_Responses]:
        for plan in plans:
            batch.append(with_head_fallbacks(plan, registry, engine))
            if len(batch) >= max(1, batch_size):
                yield from flush()
        if batch:
            yield from flush()

    done: Iterable[_Responses] = answered()
    if debias == "batch":
        done, counts = debiased(list(done))
        if debias_report is not None:
            debias_report.update(counts)
    for p, responses in done:
        for sel, _ in p.owners:  # a definition from outside ``registry`` (a variant): checked once
            key = evaluator_key(sel.definition.name, sel.definition.version)
            if key not in seen:
                seen.add(key)
                if key not in warnings and (warning := fitted_warning(sel.definition, engine, registry)) is not None:
                    warnings[key] = warning
        result = finish_plan(p, responses, checked, scalings=scalings, warnings=warnings)
        for r in result.results.values():
            if r.x_warning is not None and r.x_warning not in logged:
                logged.add(r.x_warning)
                logger.warning("%s", r.x_warning)
        yield result


def debiased(answered: Sequence[_Responses]) -> tuple[list[_Responses], dict[str, int]]:
    """Every item's responses with the typed choice/score questions batch-calibrated over all
    of them (:func:`logitjudge.rubrics.debias.batch_calibrated`), and its counts."""
    held = [((p, responses), _typed_questions(p), responses.get(MAIN_GROUP)) for p, responses in answered]
    adjusted, counts = batch_calibrated(held)
    return [(p, {**responses, MAIN_GROUP: response}) for (p, responses), _, response in adjusted], counts  # type: ignore[misc,dict-item]


def _typed_questions(plan: ItemPlan) -> list[Question | None]:
    """The plan's questions in request order, None for those the ``typed_question`` evaluator
    does not own (the evaluators' rubric questions are never batch-calibrated)."""
    typed = {k for sel, keys in plan.owners if kind_of(sel.definition).batch_debiased for k in keys}
    return [q if key in typed else None for key, q in plan.questions.items()]
