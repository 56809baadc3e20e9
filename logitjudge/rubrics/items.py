"""Items: the request fields of one thing to evaluate, and the state built from them.

An item carries ``input`` (the user's question or task), ``output`` (the answer judged),
``expected`` (a reference answer), ``context`` (retrieved chunks) and, on generic dataset rows,
a typed ``question``. The **state** is the JSON object of the data fields that are present, in
the fixed order input, output, expected, context (spec B.2); evaluator names, thresholds, ids,
labels and any other field never enter it, so the state does not depend on which evaluators run.

A field is *present* when it is not blank (:func:`is_present`: null, whitespace only, or a list
or object of blanks): blank evidence cannot be judged, so it counts as missing. A context list
that mixes real chunks with a blank one is refused (:meth:`Item.blank_chunks`): a blank chunk is
never evidence, and silently dropping it would shift every chunk index after it. ``context``
may be a list of chunks (strings, or JSON objects/arrays), a single string (one chunk) or a
single object (one chunk); the state always holds it as a list.

Dataset files may use RAGAS names; :func:`normalize_row` maps ``question``/``user_input`` ->
``input``, ``answer``/``response`` -> ``output``, ``contexts``/``retrieved_contexts`` ->
``context``, ``ground_truth``/``ground_truths``/``reference`` -> ``expected`` (our names win
when both are given). A ``question`` that is an object is a typed question, never RAGAS text.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from logitjudge.errors import InvalidRequestError
from logitjudge.rubrics.definitions import DATA_FIELDS
from logitjudge.server import schemas

__all__ = ["Item", "normalize_row", "is_present", "parse_typed_question"]

Text = str | dict[str, Any] | list[Any]

_RAGAS_NAMES: dict[str, tuple[str, ...]] = {
    "input": ("user_input", "question"),
    "output": ("response", "answer"),
    "context": ("retrieved_contexts", "contexts"),
    "expected": ("reference", "ground_truth", "ground_truths"),
}


def is_present(value: Any) -> bool:
    """True unless ``value`` is blank: None, a string that is empty after stripping whitespace, or
    a list or object whose every element is blank (``[""]``, ``{"a": " "}``). Numbers and booleans
    inside an object are present."""
    if value is None:
        return False
    if isinstance(value, str):
        return value.strip() != ""
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


def parse_typed_question(raw: dict[str, Any], *, field: tuple[str | int, ...] = ("question",)) -> Any:
    """Validate an item's typed question as a System One question (``schemas.Question``).

    Extra keys of dataset rows (``key``) are ignored, as on the wire.

    Raises:
        InvalidRequestError: the question is not a valid noul/choice/score question; ``field``
            is ``(*field, *pydantic loc)``.
    """
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(schemas.Question).validate_python(raw)
    except ValidationError as exc:
        raise InvalidRequestError.from_validation(exc.errors(include_url=False), prefix=field) from None


def _maybe_json_list(value: Any) -> Any:
    """CSV cells hold lists as JSON text (``'["a", "b"]'``); decode those, leave the rest."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def normalize_row(row: dict[str, Any]) -> dict[str, Any]:
    """Map RAGAS-style names to ours (ours win); decode JSON-list cells of ``context``.

    ``ground_truths`` with one element becomes that string. The input dict is not modified.
    """
    out = dict(row)
    for ours, theirs in _RAGAS_NAMES.items():
        if is_present(out.get(ours)):
            continue
        for name in theirs:
            value = out.get(name)
            if name == "question" and not isinstance(value, str):
                continue  # an object is a typed question, kept under its own name
            if is_present(value):
                if name == "ground_truths" and isinstance(value, list) and len(value) == 1:
                    value = value[0]
                out[ours] = value
                if name == "question":
                    del out["question"]
                break
    if "context" in out:
        out["context"] = _maybe_json_list(out["context"])
    if isinstance(out.get("question"), str):
        del out["question"]  # RAGAS text already copied, or shadowed by an explicit input
    return out
