"""The evaluate wire: pydantic models of ``POST /api/v1/evaluate`` (spec Part B).

- :class:`Item`: one thing to evaluate (the flat request's data fields, or a dataset row); a
  field is *present* when it is not blank (:func:`is_present`), and the state is the present
  data fields in the fixed order of :data:`DATA_FIELDS` (spec B.2). ``context`` may be a list
  of chunks (strings, or JSON objects/arrays), a single string or a single object (one chunk);
  the state always holds it as a list. A list that holds a blank chunk is refused
  (:meth:`Item.blank_chunks`): a blank chunk is never evidence, and dropping it silently would
  shift every chunk index after it.
- Result records (spec B.3, B.8): per evaluator, per item, per run. All numbers are finite; a
  value that cannot be determined is ``null`` and ``reason`` says why (never NaN). Extension
  fields are ``x_``-prefixed, as on the System One wire (R6); the strict wire leaves them out
  (:mod:`logitjudge.contract.extensions`).
- The route's 200 bodies: :class:`EvaluateResponse` (the flat form: ``model`` plus the item's
  result) and :class:`EvaluateBatchResponse` (the batch form). Per item and per evaluator the
  route leaves ``null`` fields out (``exclude_none``); the summary's metrics keep theirs.
"""

from __future__ import annotations

import unicodedata
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DATA_FIELDS",
    "ITEM_FIELDS",
    "FieldName",
    "Item",
    "is_present",
    "ChunkDetail",
    "EvaluatorResult",
    "ItemResult",
    "EvaluateUsage",
    "Metric",
    "EvaluatorSummary",
    "WireItemResult",
    "DebiasReport",
    "EvaluateResponse",
    "EvaluateBatchResponse",
]

Text = str | dict[str, Any] | list[Any]

DATA_FIELDS: tuple[str, ...] = ("input", "output", "expected", "context")
"""Request fields that form the state, in the order the state lists them (spec B.2)."""

ITEM_FIELDS: tuple[str, ...] = (*DATA_FIELDS, "question")
"""Fields an evaluator may require: the data fields plus a typed ``question`` (dataset rows)."""

FieldName = Literal["input", "output", "expected", "context", "question"]


def is_present(value: Any) -> bool:
    """True unless ``value`` is blank: None, a string of only whitespace and invisible format
    characters (``"\u200b"``, ``"\ufeff"``; Unicode category Cf), or
    a list or object whose every element is blank (``[""]``, ``{"a": " "}``). Numbers and booleans
    inside an object are present."""
    if value is None:
        return False
    if isinstance(value, str):
        # whitespace and invisible format characters (zero-width space, BOM, joiners: category Cf)
        return any(not (c.isspace() or unicodedata.category(c) == "Cf") for c in value)
    if isinstance(value, list):
        return any(is_present(v) for v in value)
    if isinstance(value, dict):
        return any(is_present(v) for v in value.values())
    return True


class Item(BaseModel):
    """One item to evaluate (the flat request of ``POST /api/v1/evaluate``, or a dataset row).

    Unknown fields (``meta``, ``evaluator`` of dataset rows, ...) are kept and ignored.
    ``labels`` (``{"faithfulness": true}``: should this evaluator pass?) and ``context_labels``
    (per chunk: relevant?) are gold labels for dataset summaries (spec B.8); ``gold`` is the
    labelled data sets' own gold object (``shared/data/README.md``).
    """

    model_config = ConfigDict(extra="allow")

    id: str | int | None = None
    input: Text | None = None
    output: Text | None = None
    expected: Text | None = None
    context: Text | None = None
    question: dict[str, Any] | None = None
    labels: dict[str, bool] | None = None
    context_labels: list[bool] | None = None
    gold: dict[str, Any] | None = None

    @field_validator("input", "output", "expected", "context", mode="before")
    @classmethod
    def _no_numbers(cls, v: Any) -> Any:
        # A bare number or boolean is not Text; pydantic would coerce nothing here, but say so clearly.
        if isinstance(v, (bool, int, float)):
            raise ValueError("Input should be a valid string, object or array")
        return v

    def has(self, field: str) -> bool:
        """True when ``field`` is present (see :func:`is_present`)."""
        return is_present(getattr(self, field))

    def blank_chunks(self) -> list[int]:
        """Indices of the chunks of a list context that are blank (see :func:`is_present`);
        ``[]`` when the context is not a list."""
        if not isinstance(self.context, list):
            return []
        return [i for i, chunk in enumerate(self.context) if not is_present(chunk)]

    def chunks(self) -> list[Text]:
        """The context as a list of chunks ([] when absent)."""
        if not self.has("context"):
            return []
        ctx = self.context
        return list(ctx) if isinstance(ctx, list) else [ctx]  # type: ignore[list-item]

    def state(self) -> dict[str, Any]:
        """The state: the present data fields, in the order input, output, expected, context."""
        out: dict[str, Any] = {}
        for field in DATA_FIELDS:
            if self.has(field):
                out[field] = self.chunks() if field == "context" else getattr(self, field)
        return out


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if isinstance(v, float) and not (v == v and abs(v) != float("inf")):
            raise ValueError("numbers in results must be finite (use null plus a reason)")
        return v


class ChunkDetail(_Out):
    """One chunk of a per-chunk evaluator.

    chunk_relevance: ``probability`` = p(relevant), ``label`` = "nn% yes".
    chunk_support: ``label`` = the most probable option, ``probabilities`` per option,
    ``score`` = 1 (supports), 0.5 (unrelated) or 0 (contradicts), ``passed`` = not contradicts.
    """

    index: int
    label: str
    score: float
    probability: float | None = None
    probabilities: dict[str, float] | None = None
    confidence: float
    passed: bool
    x_features: dict[str, float] | None = Field(
        default=None,
        description="chunk_relevance v2: the chunk's features before their fitted combination (pmi, "
        "pmi_sum, yes, yes_rel; see docs/reference/evaluators.md).",
    )
    x_claim: str | None = Field(
        default=None,
        description="A located verdict (`x_located`): the claim of the output this row is about (its sentence, "
        "split again at semicolons).",
    )
    x_chunk: int | None = Field(
        default=None,
        description="A located verdict: the chunk (0-based) that decides it: the one that contradicts the claim "
        "most when one contradicts it, else the one that supports it most.",
    )


class EvaluatorResult(_Out):
    """The result of one evaluator on one item (spec B.3)."""

    wire_answer_fields: ClassVar[tuple[str, ...]] = ("answer",)
    """Free-form fields that hold a System One answer (the strict wire drops their ``x_`` keys:
    :func:`~logitjudge.contract.extensions.strict_dump`)."""

    name: str
    version: str
    status: Literal["ok", "skipped", "error"]
    score: float | None = None
    label: str | None = None
    confidence: float | None = None
    probabilities: dict[str, float] | None = None
    legend: dict[str, Text] | None = None
    passed: bool | None = None
    threshold: float | None = None
    details: list[ChunkDetail] | None = None
    answer: dict[str, Any] | None = None
    reason: str | None = None
    x_soft_score: float | None = Field(
        default=None,
        description="chunk_relevance: mean p(relevant), a tie-free ranking value beside the hard precision.",
    )
    x_relevant: str | None = Field(
        default=None, description="chunk_relevance v2: the count of relevant chunks, e.g. '2/4 relevant'."
    )
    x_counts: dict[str, int] | None = Field(
        default=None, description="chunk_support v2: the number of chunks per option."
    )
    x_features: dict[str, float] | None = Field(
        default=None,
        description="answer_relevancy v2: the features its levels are computed from (logits of the "
        "probes' P(yes), their difference from a content-free output, and the padding gap).",
    )
    x_min_score: float | None = Field(
        default=None,
        description="Per-claim evaluators (claim_share scoring): the lowest claim score, the weakest "
        "sentence of the output (the score is their mean).",
    )
    x_p_yes_without_context: float | None = Field(
        default=None,
        description="Evaluators with contrast 'context' (faithfulness): P(yes) of the same question over "
        "the state without `context`; the score is sigmoid(logit P(yes | with context) - logit of this), "
        "how much the context raises P(yes) (0.5: the context changes nothing).",
    )
    x_p_yes_with_context: float | None = Field(
        default=None,
        description="Evaluators with contrast 'context': P(yes) over the whole state, before the contrast.",
    )
    x_score_uncalibrated: float | None = Field(
        default=None,
        description="Evaluators with a calibration scaling of their score (a shipped or --calibration "
        "file's 'evaluators'): the score after the engine's buckets and before that scaling; score, "
        "passed and confidence are after it.",
    )
    x_located: list[ChunkDetail] | None = Field(
        default=None,
        description="Located verdicts (faithfulness, when chunk_support@4 runs on the same item): one row per claim "
        "of the output (`index` the claim's, `x_claim` its text) naming the chunk that decides it (`x_chunk`); "
        "read from that evaluator's per-chunk, per-claim answers; the score is not changed by them.",
    )
    x_located_by: str | None = Field(
        default=None,
        description="Set with `x_located`: the evaluator version whose answers located the verdicts "
        "(e.g. 'chunk_support@4').",
    )
    x_warning: str | None = Field(
        default=None,
        description="Set when the result rests on something this engine was not checked for: an "
        "evaluator's fitted coefficients (chunk_relevance v2, chunk_support v2 and v3, answer_relevancy v2) "
        "applied on a model other than the one they were fitted on. Refit them for this model, or "
        "select a version without fitted coefficients (docs/reference/evaluators.md).",
    )
    x_option_mass: float | None = Field(
        default=None,
        description="The lowest x_option_mass of this evaluator's answers: the probability the model "
        "put on the answer labels before renormalising over them (one answer per chunk for per-chunk "
        "evaluators). Under logitjudge.settings.LOW_OPTION_MASS (0.05) the scores rest on almost nothing.",
    )


class EvaluateUsage(_Out):
    """Token accounting of an evaluation: engine requests made (one per item with questions)."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0


class ItemResult(_Out):
    """All evaluator results of one item; ``passed`` is True when every ok result with a pass
    rule passed, False when one failed, None when none had a pass rule."""

    id: str | int | None = None
    results: dict[str, EvaluatorResult]
    passed: bool | None
    usage: EvaluateUsage


class Metric(_Out):
    """One aggregate figure, as a record (name, value, n, stderr, direction); ``value`` is null
    with a ``reason`` when undetermined (e.g. no gold labels, a zero denominator)."""

    name: str
    value: float | None
    n: int
    stderr: float | None = None
    higher_is_better: bool = True
    reason: str | None = None


class EvaluatorSummary(_Out):
    """Dataset aggregates of one evaluator (spec B.8): counts plus metric records."""

    name: str
    n: int = Field(description="items where the evaluator ran (status ok)")
    skipped: int
    errors: int
    metrics: list[Metric]

    def metric(self, name: str) -> Metric | None:
        """The metric called ``name``, or None."""
        return next((m for m in self.metrics if m.name == name), None)

    def value(self, name: str) -> float | None:
        """The value of metric ``name`` (None when absent or undetermined)."""
        m = self.metric(name)
        return None if m is None else m.value


class WireItemResult(ItemResult):
    """An :class:`ItemResult` as the route sends it: ``null`` fields are left out, so ``passed``
    (no evaluator gave a verdict) and ``id`` may be absent."""

    passed: bool | None = Field(default=None, description="all verdicts passed; absent when no evaluator gave one")


class EvaluateResponse(WireItemResult):
    """200 body of the flat (single-item) form of ``POST /api/v1/evaluate``."""

    model: str = Field(description="the served model (not the request's alias)")


class DebiasReport(_Out):
    """``x_debias`` of a batch response sent with ``"x_debias": "batch"``
    (:func:`logitjudge.rubrics.debias.batch_calibrated`'s counts)."""

    mode: Literal["batch"]
    questions: int = Field(description="question groups whose prior was divided out")
    answers: int = Field(description="answers adjusted")
    left: int = Field(description="choice/score question groups asked too few times to adjust")


class EvaluateBatchResponse(_Out):
    """200 body of the batch form (``items``) of ``POST /api/v1/evaluate``."""

    model: str = Field(description="the served model (not the request's alias)")
    results: list[WireItemResult] = Field(description="one per item, in request order")
    summary: dict[str, EvaluatorSummary] = Field(description="per evaluator: counts and metrics over the items")
    usage: EvaluateUsage
    x_debias: DebiasReport | None = Field(default=None, description="extension: present with `x_debias: batch`")
