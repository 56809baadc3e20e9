"""Planned rows through a server's ``POST /api/v1/evaluate``: :func:`remote_results`.

The rows are planned on this side exactly as a local run plans them
(:func:`~logitjudge.rubrics.runner.plan_item`, not strict): what needs no model (an evaluator
skipped for a missing field, an invalid typed question) is decided here, and each row sends only
the evaluators that run on it, by name (``name@version`` for a pinned earlier version). Up to
``batch_size`` consecutive rows that send the same evaluators go in one call (the batch form);
the server's item results, with the rows' local results merged in, are the records. So a
results file has the same rows, whether a local model or a server of the same engine made them.

Every evaluator result must report the version selected here (or, for an evaluator with a
trained head, its fallback version: a server without the head answers that), else the run stops
(:class:`~logitjudge.client.errors.ServerMismatchError`). A 422 that names items of the batch
(``items[3].context``) fails those rows only (error rows, run again on a resume); a 413 (body too
large) or a 422 on the number of items halves the batch; items answered with ``OverloadedError``
results (a logitjudge server whose queue filled while it ran the batch) are sent again, under
the client's retry bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from logitjudge.client.errors import ServerFailedError, ServerMismatchError, ServerRefusedError
from logitjudge.client.http import ServerClient
from logitjudge.client.wire import EVALUATE_PATH
from logitjudge.contract.evaluate import ITEM_FIELDS
from logitjudge.errors import InvalidRequestError, LogitJudgeError
from logitjudge.rubrics.questions import MAIN_GROUP
from logitjudge.rubrics.registry import Registry
from logitjudge.rubrics.runner import CONTRAST_GROUP, ItemPlan, finish_plan

__all__ = ["OVERLOADED_REASON", "wire_evaluators", "remote_results"]

OVERLOADED_REASON = "OverloadedError"
"""How a logitjudge server's batch reports an item it could not queue (the reason's prefix)."""


def wire_evaluators(plan: ItemPlan, registry: Registry) -> tuple[str, ...]:
    """The evaluator names a planned row sends: the evaluators that run on it (not those decided
    without a model), each by name, or ``name@version`` when the selection pins an earlier version."""
    out = []
    for sel, _ in plan.owners:
        d = sel.definition
        out.append(d.name if registry.evaluators.get(d.name) == d else f"{d.name}@{d.version}")
    return tuple(out)


@dataclass
class _Row:
    index: int
    rid: str
    plan: ItemPlan
    names: tuple[str, ...]
    wire: dict[str, Any] = field(default_factory=dict)
    unsendable: LogitJudgeError | None = None


def _prepare(index: int, rid: str, plan: ItemPlan, registry: Registry) -> _Row:
    """The row's request item and evaluator names, or why it cannot be sent: a state that is not
    valid Text (as a local run's engine request refuses it), or a blank context chunk (which a
    server refuses for the whole item)."""
    row = _Row(index, rid, plan, wire_evaluators(plan, registry))
    item = plan.item
    row.wire = {"id": rid, **{f: getattr(item, f) for f in ITEM_FIELDS if getattr(item, f) is not None}}
    if not row.names:
        return row
    try:
        plan.engine_requests()
    except InvalidRequestError as exc:
        row.unsendable = exc
        return row
    blank = item.blank_chunks()
    if blank:
        row.unsendable = ServerRefusedError(
            f"not sent: context[{blank[0]}] is blank (only whitespace or invisible characters), and a server "
            "refuses an item with a blank chunk; remove it",
            status=0,
        )
    return row


def _failed_record(row: _Row, exc: LogitJudgeError, thresholds: Mapping[str, float]) -> dict[str, Any]:
    """The row with its local results, and ``error`` (``exc``) for every evaluator that needed an answer."""
    keys = [MAIN_GROUP, CONTRAST_GROUP, *row.plan.groups]
    result = finish_plan(row.plan, {k: exc for k in keys}, thresholds)
    return result.model_dump(mode="json", exclude_none=True)


def _check_versions(row: _Row, got: Mapping[str, Any], call: str) -> None:
    """Every evaluator the row sent has a result, of the version selected here (or its head's fallback).

    Raises:
        ServerFailedError: a result is missing. ServerMismatchError: another version.
    """
    for sel, _ in row.plan.owners:
        d = sel.definition
        if d.name not in got:
            raise ServerFailedError(f"{call}: no result for {d.name} on row {row.rid}")
        version = got[d.name].get("version")
        fallback = d.head.fallback if d.head is not None else None  # a server without the head answers it
        if version is not None and str(version) not in (d.version, fallback):
            raise ServerMismatchError(
                f"the server answers {d.name} version {version}, where the selection here is version "
                f"{d.version}, so the rows would not be what {d.name} means in this run; update the "
                f"server or this install, or select {d.name}@{version} (if this install knows it)"
            )


def _merged(row: _Row, item: Mapping[str, Any], call: str) -> dict[str, Any]:
    """The server's item result with the row's local results (skipped, ...) merged in, in the
    selection's order; ``passed`` recomputed over both as the engine's runner computes it.

    Raises:
        ServerFailedError: a sent evaluator has no result, or the item's id is another row's.
        ServerMismatchError: a result reports another version than the one selected here.
    """
    if item.get("id") not in (None, row.rid):
        raise ServerFailedError(f"{call}: the results are not in the order of the items (got id {item.get('id')!r})")
    got = item["results"]
    _check_versions(row, got, call)
    early = {n: r.model_dump(mode="json", exclude_none=True) for n, r in row.plan.early.items()}
    results = {n: early[n] if n in early else got[n] for n in row.plan.order}
    verdicts = [r["passed"] for r in results.values() if r.get("status") == "ok" and isinstance(r.get("passed"), bool)]
    out: dict[str, Any] = {"id": row.rid, "results": results}
    if verdicts:
        out["passed"] = all(verdicts)
    out["usage"] = item.get("usage") if isinstance(item.get("usage"), dict) else {}
    out.update({k: v for k, v in item.items() if k not in ("id", "results", "passed", "usage")})
    return out


def _overloaded(record: Mapping[str, Any]) -> bool:
    return any(
        r.get("status") == "error" and str(r.get("reason", "")).startswith(OVERLOADED_REASON)
        for r in record.get("results", {}).values()
        if isinstance(r, Mapping)
    )


class _Sender:
    """Sends batches of rows and turns the answers into records (see :func:`remote_results`)."""

    def __init__(
        self, client: ServerClient, *, model: str, thresholds: Mapping[str, float], extra: Mapping[str, Any]
    ) -> None:
        self.client = client
        self.model = model
        self.thresholds = dict(thresholds)
        self.extra = dict(extra)
        self.served: str | None = None
        self.cap: int | None = None  # items per call the server took, after it refused more

    def send(self, rows: Sequence[_Row]) -> dict[int, dict[str, Any]]:
        """Records of ``rows`` by index: one call (or a few, when the server refuses the size or some items)."""
        if self.cap is not None and len(rows) > self.cap:
            out: dict[int, dict[str, Any]] = {}
            for start in range(0, len(rows), self.cap):
                out.update(self.send(rows[start : start + self.cap]))
            return out
        own = {sel.definition.name for sel, _ in rows[0].plan.owners}
        try:
            served, got = self.client.evaluate_batch(
                rows[0].names,
                [r.wire for r in rows],
                model=self.model,
                thresholds={k: v for k, v in self.thresholds.items() if k in own},
                extra=self.extra,
            )
        except ServerRefusedError as exc:
            return self._refused(rows, exc)
        if served is not None:
            if self.served is not None and served != self.served:
                raise ServerMismatchError(
                    f"the server at {self.client.url} now serves {served!r}, not {self.served!r} as when "
                    "this run began; its answers cannot go in this results file"
                )
            self.served = served
        call = f"POST {self.client.url}{EVALUATE_PATH}"
        return {r.index: _merged(r, item, call) for r, item in zip(rows, got, strict=True)}

    def _refused(self, rows: Sequence[_Row], exc: ServerRefusedError) -> dict[int, dict[str, Any]]:
        """Records after a refusal: the batch in halves (too large), the items it names as error
        rows and the rest again, one item over the body limit as an error row; else ``exc`` raised."""
        if exc.too_large and len(rows) > 1:
            half = (len(rows) + 1) // 2
            self.cap = half if self.cap is None else min(self.cap, half)
            return {**self.send(rows[:half]), **self.send(rows[half:])}
        if exc.items and all(0 <= j < len(rows) for j in exc.items):
            out = {
                rows[j].index: _failed_record(
                    rows[j], ServerRefusedError(f"the server refused the item ({exc.status}): {msg}", status=0), {}
                )
                for j, msg in exc.items.items()
            }
            rest = [r for j, r in enumerate(rows) if j not in exc.items]
            return {**out, **(self.send(rest) if rest else {})}
        if exc.too_large:  # one item, over the server's body limit
            return {rows[0].index: _failed_record(rows[0], exc, {})}
        raise exc

    def batch(self, rows: Sequence[_Row]) -> dict[int, dict[str, Any]]:
        """:meth:`send`, then the items the server was too busy for again, with backoff (bounded)."""
        done = self.send(rows)
        todo = [r for r in rows if _overloaded(done[r.index])]
        for attempt in range(self.client.retries):
            if not todo:
                break
            self.client.backoff(attempt, f"the server was overloaded for {len(todo)} of the items")
            done.update(self.send(todo))
            todo = [r for r in todo if _overloaded(done[r.index])]
        return done


def remote_results(
    client: ServerClient,
    pending: Sequence[tuple[str, ItemPlan]],
    *,
    registry: Registry,
    thresholds: Mapping[str, float],
    model: str,
    batch_size: int,
    extra: Mapping[str, Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run planned rows through the server: ``(position in pending, results record)`` for each
    row, as each call returns (in ``pending`` order within a call), so the caller can write each
    before the next call (an error then stops the run with every finished row kept).

    A record is what a local run's :func:`~logitjudge.rubrics.runner.finish_plan` dumps
    (``exclude_none``): ``{"id", "results", "passed"?, "usage"}``, plus any other field the server
    adds to an item. A row that runs no evaluator makes no call; rows that send other evaluators
    than the batch gathered so far start a new call.

    Args:
        pending: (row id, plan) of each row to run, the plans as
            :func:`~logitjudge.rubrics.runner.plan_item` made them (``strict=False``).
        thresholds: pass-threshold overrides (validated), sent with the evaluators they name.
        model: the ``model`` each request names.
        batch_size: rows per call at most (>= 1).
        extra: more top-level request fields (a logitjudge extension such as ``x_strict_wire``).

    Raises:
        ServerError: the run cannot go on (see :mod:`logitjudge.client.http`); the rows yielded
            before stay valid.
    """
    sender = _Sender(client, model=model, thresholds=thresholds, extra=extra or {})
    batch: list[_Row] = []
    riders: dict[int, dict[str, Any]] = {}  # rows decided here, yielded with the call they follow

    def flush() -> Iterator[tuple[int, dict[str, Any]]]:
        done = dict(riders)
        if batch:
            done.update(sender.batch(batch))
        batch.clear()
        riders.clear()
        for index in sorted(done):
            yield index, done[index]

    for index, (rid, plan) in enumerate(pending):
        row = _prepare(index, rid, plan, registry)
        if not row.names or row.unsendable:
            if row.unsendable:
                record = _failed_record(row, row.unsendable, thresholds)
            else:
                record = finish_plan(plan, {}, thresholds).model_dump(mode="json", exclude_none=True)
            riders[index] = record
            if not batch:
                yield from flush()
            continue
        if batch and (batch[0].names != row.names or len(batch) >= batch_size):
            yield from flush()
        batch.append(row)
    yield from flush()
