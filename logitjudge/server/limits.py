"""Request limits beyond the wire schema: questions per request, items per batch, string length.

The wire models (``logitjudge.contract.systemone``) hold the contract's fixed ranges (2..255 options,
2..10 levels); the limits here are the operator's, so they are configurable
(:class:`~logitjudge.server.config.ServerConfig`, ``logitjudge serve --max-questions`` ...) and
checked after the body validated, before any tokenizer or engine work. The body size cap
(413) is enforced earlier, in ``logitjudge.server.middleware.BodyMiddleware``.

Each refusal is a 422 with the validation shape (``spec/api.md`` A.5.3): ``loc`` names the field,
``type`` is pydantic's (``too_long`` / ``string_too_long``), and ``msg`` and ``ctx`` name the limit
and the ``serve`` flag that raises it::

    {"detail": [{"loc": ["body", "questions"], "type": "too_long",
                 "msg": "at most 256 questions per request (max_questions; "
                        "logitjudge serve --max-questions), got 300",
                 "ctx": {"limit": "max_questions", "max_length": 256, "actual_length": 300}}]}

This module imports no fastapi and no torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from logitjudge.errors import InvalidRequestError

__all__ = ["RequestLimits", "check_systemone", "check_evaluate", "check_questions_per_item"]

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class RequestLimits:
    """The operator's limits on one request.

    Attributes:
        max_questions: questions in one System One request, and questions one evaluate item
            expands to (chunk evaluators ask one per context chunk) (>= 1).
        max_items: items in one ``POST /api/v1/evaluate`` batch (>= 1).
        max_text_chars: characters in any one string of a request: the state, an instruction,
            an option name or description, a question id, an item field, a context chunk, a
            string inside structured Text, or an object key there (>= 1). Checked before
            tokenizing, so a huge string costs no tokenizer time; the token budgets (413) still
            apply to what passes.
    """

    max_questions: int = 256
    max_items: int = 1000
    max_text_chars: int = 262_144

    def __post_init__(self) -> None:
        if min(self.max_questions, self.max_items, self.max_text_chars) < 1:
            raise ValueError("max_questions, max_items and max_text_chars must be >= 1")


FLAGS = {
    "max_questions": "--max-questions",
    "max_items": "--max-items",
    "max_text_chars": "--max-text-chars",
}


def _refuse(loc: Loc, type_: str, what: str, limit_name: str, limit: int, actual: int) -> InvalidRequestError:
    msg = f"{what} ({limit_name}; logitjudge serve {FLAGS[limit_name]}), got {actual}"
    ctx = {"limit": limit_name, "max_length": limit, "actual_length": actual}
    return InvalidRequestError(msg, field=loc, details=[{"loc": loc, "msg": msg, "type": type_, "ctx": ctx}])


def _strings(value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    """Every string in ``value`` (object keys too) with the location of the field holding it.

    Iterative: structured Text is at most 64 levels deep (the schema), but a walk must not rely
    on it.
    """
    stack: list[tuple[Any, Loc]] = [(value, loc)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, sub in item.items():
                yield where, str(key)
                stack.append((sub, (*where, str(key))))
        elif isinstance(item, (list, tuple)):
            stack.extend((sub, (*where, i)) for i, sub in enumerate(item))


def _check_strings(pairs: Iterator[tuple[Loc, str]], limits: RequestLimits) -> None:
    cap = limits.max_text_chars
    for loc, text in pairs:
        if len(text) > cap:
            raise _refuse(
                loc,
                "string_too_long",
                f"a string may have at most {cap} characters",
                "max_text_chars",
                cap,
                len(text),
            )


def check_systemone(body: Any, limits: RequestLimits) -> None:
    """Check a validated ``SystemOneRequest`` against ``limits``.

    Raises:
        InvalidRequestError: the first limit exceeded (a 422 naming the field and the limit).
    """
    n = len(body.questions)
    if n > limits.max_questions:
        raise _refuse(
            ("questions",),
            "too_long",
            f"at most {limits.max_questions} questions per request",
            "max_questions",
            limits.max_questions,
            n,
        )

    def pairs() -> Iterator[tuple[Loc, str]]:
        yield from _strings(body.state, ("state",))
        for qid, q in body.questions.items():
            where: Loc = ("questions", qid)
            yield where, qid
            yield from _strings(q.instructions, (*where, "instructions"))
            criteria = q.criteria.model_dump() if hasattr(q.criteria, "model_dump") else q.criteria
            yield from _strings(criteria, (*where, "criteria"))

    _check_strings(pairs(), limits)


def check_evaluate(body: Any, data_fields: Sequence[str], limits: RequestLimits) -> None:
    """Check a validated ``EvaluateRequest``: items per batch and every string of its data fields.

    Raises:
        InvalidRequestError: the first limit exceeded (a 422 naming the field and the limit).
    """
    items = body.items or []
    if len(items) > limits.max_items:
        raise _refuse(
            ("items",),
            "too_long",
            f"at most {limits.max_items} items per request",
            "max_items",
            limits.max_items,
            len(items),
        )

    def pairs() -> Iterator[tuple[Loc, str]]:
        for prefix, item in [((), body), *((("items", j), it) for j, it in enumerate(items))]:
            for name in data_fields:
                yield from _strings(getattr(item, name, None), (*prefix, name))

    _check_strings(pairs(), limits)


def check_questions_per_item(counts: Sequence[int], batch: bool, limits: RequestLimits) -> None:
    """Refuse an evaluate item whose evaluators expand to more than ``max_questions`` questions.

    ``counts`` are the questions of each item's plan, in item order; the blame goes to ``context``
    (chunk evaluators ask one question per chunk).
    """
    for j, n in enumerate(counts):
        if n > limits.max_questions:
            loc: Loc = ("items", j, "context") if batch else ("context",)
            raise _refuse(
                loc,
                "too_long",
                f"the selected evaluators ask at most {limits.max_questions} questions per item",
                "max_questions",
                limits.max_questions,
                n,
            )
