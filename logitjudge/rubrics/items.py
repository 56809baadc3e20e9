"""Items: the request fields of one thing to evaluate, and the state built from them.

An item carries ``input`` (the user's question or task), ``output`` (the answer judged),
``expected`` (a reference answer), ``context`` (retrieved chunks) and, on generic dataset rows,
a typed ``question``. The **state** is the JSON object of the data fields that are present, in
the fixed order input, output, expected, context (spec B.2); evaluator names, thresholds, ids,
labels and any other field never enter it, so the state does not depend on which evaluators run.

A field is *present* when it is not blank (:func:`is_present`: null, whitespace only, or a list
or object of blanks): blank evidence cannot be judged, so it counts as missing. A context list
that mixes real chunks with a blank one is refused (:meth:`Item.blank_chunks`): a blank chunk is
never evidence, and silently dropping it would shift every chunk index after it. ``context`` may be a list of chunks (strings,
or JSON objects/arrays), a single string (one chunk) or a single object (one chunk); the state
always holds it as a list.

Dataset files may use RAGAS names; :func:`normalize_row` maps ``question``/``user_input`` ->
``input``, ``answer``/``response`` -> ``output``, ``contexts``/``retrieved_contexts`` ->
``context``, ``ground_truth``/``ground_truths``/``reference`` -> ``expected`` (our names win
when both are given). A ``question`` that is an object is a typed question, never RAGAS text.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from logitjudge.contract import systemone as schemas
from logitjudge.contract.evaluate import is_present
from logitjudge.errors import InvalidRequestError

__all__ = ["normalize_row", "parse_typed_question"]

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
        first = exc.errors()[0]
        loc = (*field, *first.get("loc", ()))
        err = InvalidRequestError(f"{'.'.join(map(str, loc))}: {first.get('msg', 'invalid')}", field=loc)
        err.errors = [  # type: ignore[attr-defined]
            {**e, "loc": (*field, *e.get("loc", ()))} for e in exc.errors(include_url=False)
        ]
        raise err from None


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
