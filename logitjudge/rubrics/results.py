"""Result records of ``POST /api/v1/evaluate`` (spec B.3, B.8): per evaluator, per item, per run.

All numbers are finite; a value that cannot be determined is ``null`` and ``reason`` says why
(never NaN). Extension fields are ``x_``-prefixed, as on the System One wire (R6).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ChunkDetail", "EvaluatorResult", "ItemResult", "EvaluateUsage", "Metric", "EvaluatorSummary"]

Text = str | dict[str, Any] | list[Any]


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


class EvaluatorResult(_Out):
    """The result of one evaluator on one item (spec B.3)."""

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
