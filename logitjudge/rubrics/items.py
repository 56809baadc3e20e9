"""Dataset rows -> items: RAGAS names, CSV list cells, typed questions, length baselines.

The :class:`~logitjudge.contract.evaluate.Item` itself (its fields, when a field is *present*,
the state built from it, blank chunks) is part of the wire contract
(:mod:`logitjudge.contract.evaluate`). Here:

- :func:`normalize_row` maps RAGAS names to ours: ``question``/``user_input`` -> ``input``,
  ``answer``/``response`` -> ``output``, ``contexts``/``retrieved_contexts`` -> ``context``,
  ``ground_truth``/``ground_truths``/``reference`` -> ``expected`` (our names win when both are
  given). A ``question`` that is an object is a typed question, never RAGAS text.
- :func:`parse_typed_question` validates a row's typed question as a System One question.
- :func:`text_lengths`: the lengths the length baselines compare.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from logitjudge.contract import systemone as schemas
from logitjudge.contract.evaluate import is_present
from logitjudge.errors import InvalidRequestError

__all__ = ["normalize_row", "parse_typed_question", "text_lengths"]

_RAGAS_NAMES: dict[str, tuple[str, ...]] = {
    "input": ("user_input", "question"),
    "output": ("response", "answer"),
    "context": ("retrieved_contexts", "contexts"),
    "expected": ("reference", "ground_truth", "ground_truths"),
}


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


def text_lengths(row: Mapping[str, Any]) -> dict[str, int]:
    """Lengths, in characters, of a raw row's ``output`` and ``context`` (our or RAGAS names),
    for the length baselines: a list counts the sum of its chunks (structured chunks as their
    JSON); absent fields are left out."""
    normalized = normalize_row(dict(row))
    out: dict[str, int] = {}
    for key in ("output", "context"):
        value = normalized.get(key)
        if value is None:
            continue
        parts = value if isinstance(value, list) else [value]
        out[key] = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in parts)
    return out
