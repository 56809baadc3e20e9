"""Extension fields (``x_...``) and the strict wire, which leaves them out.

The contract names every field it does not define ``x_...`` (``spec/api.md`` A.6.1 R6: a client
that knows the contract ignores them). Some clients validate responses against a closed schema
(``additionalProperties: false``) and reject any extension; for them a server answers on the
*strict wire*: the same body without any extension field, at any depth.

Only fields that a response model declares are extensions. Keys of dict fields (question ids,
option names, evaluator names) and the contents of free-form fields (a structured legend level,
``EvaluatorResult.answer``'s values) are data: a question id ``x_y_z`` or an option ``x_small``
comes back byte for byte on the strict wire too.

This module imports pydantic only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["EXTENSION_PREFIX", "is_extension", "strict_dump"]

EXTENSION_PREFIX = "x_"
"""The prefix of every field the contract does not define, in requests and responses alike."""


def is_extension(name: str) -> bool:
    """True when a field called ``name`` is an extension (``x_option_mass``, ``x_debias``)."""
    return name.startswith(EXTENSION_PREFIX)


def _without(value: Any, dumped: Any) -> Any:
    """``dumped`` (``value``'s JSON dump) less the extension fields of every model in ``value``."""
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        fields = type(value).model_fields
        answers = getattr(value, "wire_answer_fields", ())
        out: dict[str, Any] = {}
        for key, sub in dumped.items():
            if key in fields and is_extension(key):
                continue
            if key in answers and isinstance(sub, dict):  # a System One answer held as a plain dict
                out[key] = {k: v for k, v in sub.items() if not is_extension(k)}
            elif key in fields:
                out[key] = _without(getattr(value, key), sub)
            else:
                out[key] = sub
        return out
    if isinstance(value, dict) and isinstance(dumped, dict):
        # keys are data (question ids, option names): kept, whatever they start with
        return {key: _without(value.get(key), sub) for key, sub in dumped.items()}
    if isinstance(value, (list, tuple)) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_without(v, d) for v, d in zip(value, dumped)]
    return dumped


def strict_dump(model: BaseModel, *, exclude_none: bool = True) -> dict[str, Any]:
    """``model.model_dump(mode="json", exclude_none=...)`` without any extension field.

    Every nested model (an answer inside ``answers``, a result inside ``results``, a chunk inside
    ``details``) loses the fields it declares with the ``x_`` prefix; a model may also list, in a
    class attribute ``wire_answer_fields``, free-form dict fields that hold a System One answer,
    whose top-level ``x_`` keys are dropped too. Dict keys and free-form values are kept as sent
    (see the module docstring).

    Returns:
        The JSON-ready dict, as ``model_dump`` would give it, less the extensions.
    """
    dumped = model.model_dump(mode="json", exclude_none=exclude_none)
    out = _without(model, dumped)
    assert isinstance(out, dict)
    return out
