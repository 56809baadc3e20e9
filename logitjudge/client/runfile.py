"""The results file of an evaluate run and what produced it (``<out>.run.json``).

A results file holds one JSON line per data row (:mod:`logitjudge.rubrics.dataio`); its run record
holds the evaluator selection (versions, thresholds, ``debias``), every set of model flags seen to
give its engine (``{"server": URL}`` for a run through a server), and that engine (model,
fingerprint, prompt version, dtype, calibration, rotations). A run on an existing file resumes it
(rows finished cleanly are kept, rows with an error run again) only under the same selection and
engine; else it is refused with every difference named (:class:`ResultsFileError`). The same
file is kept by ``logitjudge evaluate`` with a local model and through a server
(:func:`logitjudge.client.evaluate`), so a file may be resumed either way.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from logitjudge.client.errors import ResultsFileError
from logitjudge.errors import InvalidRequestError, RequestError
from logitjudge.rubrics.aggregate import DATASET_EVALUATORS, gold_of
from logitjudge.rubrics.api import AUTO, selection_for, to_item
from logitjudge.rubrics.dataio import (
    ResultsWriter,
    read_run_record,
    row_id,
    run_record_path,
    scan_results,
    write_run_record,
)
from logitjudge.rubrics.items import text_lengths
from logitjudge.rubrics.registry import Registry, Selected
from logitjudge.rubrics.runner import ItemPlan, plan_item

__all__ = [
    "RUN_RECORD_FORMAT",
    "ENGINE_KEYS",
    "Pending",
    "row_ids",
    "named",
    "check_out",
    "selection_record",
    "selection_differences",
    "engine_differences",
    "plan_rows",
    "nothing_plannable",
    "result_record",
    "RunFile",
]

RUN_RECORD_FORMAT = "logitjudge-evaluate-run/1"

ENGINE_KEYS = ("model", "fingerprint", "prompt_version", "dtype", "precision", "calibration", "default_rotations")
"""What identifies the engine behind a results file: the same keys give the same answers."""

Pending = tuple[str, dict[str, Any], ItemPlan]
"""A row to run: (its id, the data row, its plan)."""

AFRESH = "Use another results file (--out), or overwrite it (--overwrite; overwrite=True in Python)"


def row_ids(rows: Sequence[Mapping[str, Any]], data: str) -> list[str]:
    """Each row's id (its ``id``, else its position; :func:`~logitjudge.rubrics.dataio.row_id`).

    Raises:
        InvalidRequestError: two rows share an id (``data`` names the file in the message).
    """
    ids = [row_id(dict(r), i) for i, r in enumerate(rows)]
    seen: set[str] = set()
    dupes = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    if dupes:
        raise InvalidRequestError(f"{data}: duplicate ids (resuming needs unique ids): {', '.join(dupes[:5])}")
    return ids


def check_out(out: Path, data: Path | None) -> None:
    """``out`` can be a results file: not a directory, not the data file itself.

    Raises:
        ResultsFileError: it cannot.
    """
    if out.is_dir():
        raise ResultsFileError(f"--out {out}: is a directory; give the results file's path")
    if data is not None and out.exists() and data.exists() and out.resolve() == data.resolve():
        raise ResultsFileError(f"--out {out} is the data file itself; results go to another file")


def selection_record(
    registry: Registry,
    requested: Sequence[str],
    fixed: Sequence[Selected] | None,
    rows: Sequence[Mapping[str, Any]],
    thresholds: Mapping[str, float],
    debias: str = "none",
) -> dict[str, Any]:
    """The evaluator selection of a run: the evaluators it resolves to (or ``auto``), their
    versions and effective thresholds, the ``debias`` mode, and the names as given (for
    messages only).

    With ``auto`` the versions and thresholds are those of the evaluators the rows name.
    """
    if fixed is not None:
        evaluators: str | list[str] = [s.name for s in fixed]
        names = list(evaluators)
    else:
        evaluators = AUTO
        own = {DATASET_EVALUATORS.get(e, e) for r in rows if isinstance(e := r.get("evaluator"), str)}
        if any(isinstance(r.get("question"), dict) for r in rows):
            own.add("typed_question")
        names = sorted(n for n in own if n in registry.evaluators)
    defs = {n: registry.evaluators[n] for n in names}
    return {
        "requested": list(requested),
        "evaluators": evaluators,
        "versions": {n: d.version for n, d in defs.items()},
        "thresholds": {n: thresholds.get(n, d.threshold) for n, d in defs.items()},
        "debias": debias,
    }


def _shown(value: Any, *, digest: bool = False) -> str:
    """A recorded value for a message: lists joined, digests shortened to 12 characters."""
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(none)"
    if digest and isinstance(value, str) and len(value) > 12:
        return value[:12] + "…"
    return "none" if value is None else str(value)


def selection_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a recorded and the current evaluator selection (empty when none)."""
    out = []
    if recorded.get("evaluators") != current["evaluators"]:
        old = recorded.get("requested", recorded.get("evaluators"))
        out.append(f"--evaluators: {_shown(current['requested'])} now, {_shown(old)} in the file")
    if recorded.get("debias", "none") != current.get("debias", "none"):
        out.append(f"--debias: {current.get('debias', 'none')} now, {recorded.get('debias', 'none')} in the file")
    for key, what in (("versions", "version"), ("thresholds", "threshold")):
        old = recorded.get(key) or {}
        for name in sorted(set(old) & set(current[key])):
            if old[name] != current[key][name]:
                out.append(f"{name} {what}: {current[key][name]} now, {old[name]} in the file")
    return out


def engine_value(engine: Mapping[str, Any], key: str) -> Any:
    """``engine[key]``; a ``precision`` an older record or server lacks is its ``dtype`` (fp32 and
    mixed precision share the weights' dtype, so ``dtype`` alone cannot tell them apart)."""
    if key == "precision" and engine.get(key) is None:
        return engine.get("dtype")
    return engine.get(key)


def engine_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between the recorded and the current engine (:data:`ENGINE_KEYS`)."""
    out = []
    for key in ENGINE_KEYS:
        if engine_value(recorded, key) != engine_value(current, key):
            digest = key in ("fingerprint", "calibration")
            now = _shown(engine_value(current, key), digest=digest)
            then = _shown(engine_value(recorded, key), digest=digest)
            out.append(f"{key}: {now} now, {then} in the file")
    return out


def _refusal(out: Path, differences: Sequence[str]) -> ResultsFileError:
    return ResultsFileError(
        f"{out} was produced by another configuration ({'; '.join(differences)}); resuming would mix "
        f"both in one file. {AFRESH} to start {out.name} afresh."
    )


def plan_rows(
    registry: Registry,
    fixed: Sequence[Selected] | None,
    ids: Sequence[str],
    rows: Sequence[dict[str, Any]],
    done: set[str],
) -> tuple[list[Pending], list[tuple[str, str, bool]]]:
    """(plans of the rows not ``done``, rows that cannot be planned: (id, error, lacks an evaluator)).

    ``fixed``: the selection of every row, or None for each row's own (``auto``).
    """
    pending: list[Pending] = []
    invalid: list[tuple[str, str, bool]] = []
    for rid, raw in zip(ids, rows, strict=True):
        if rid in done:
            continue
        try:
            item = to_item({**raw, "id": rid}, where=f"row {rid!r}")
            plan = plan_item(item, fixed or selection_for(registry, AUTO, item), strict=False)
        except RequestError as exc:
            lacks = fixed is None and exc.field == ("evaluator",) and not isinstance(raw.get("evaluator"), str)
            invalid.append((rid, f"{type(exc).__name__}: {exc.message}", lacks))
            continue
        pending.append((rid, raw, plan))
    return pending, invalid


def named(rid: str, why: str) -> str:
    """An invalid row's error for a person, with the row's id unless the error names it already."""
    return why if f"row {rid!r}" in why else f"row {rid!r}: {why}"


def nothing_plannable(data: str, invalid: Sequence[tuple[str, str, bool]]) -> str:
    """Why no row of ``data`` can run (every row is in ``invalid``), for a person."""
    lacking = sum(lacks for *_, lacks in invalid)
    if lacking == len(invalid):
        return (
            f"{data}: no row has an `evaluator` field, and --evaluators is auto (the default), so no "
            "evaluator can be chosen for any row; name them, e.g. --evaluators RAG (or "
            "faithfulness,answer_relevancy). Nothing was run or written."
        )
    first = next((rid, why) for rid, why, lacks in invalid if not lacks)
    return (
        f"{data}: no row can be evaluated ({len(invalid) - lacking} invalid rows, {lacking} without an "
        f"`evaluator` field while --evaluators is auto); first: {named(*first)}. Nothing was run or written."
    )


def result_record(rid: str, raw: Mapping[str, Any], res: Any) -> dict[str, Any]:
    """The results-file row of one item: its result (an ``ItemResult``, or a server's record of
    one as :func:`~logitjudge.client.batches.remote_results` gives it), id, dataset evaluator, gold
    and lengths (``x_lengths``, characters)."""
    record = dict(res) if isinstance(res, Mapping) else res.model_dump(mode="json", exclude_none=True)
    record["id"] = rid
    if isinstance(raw.get("evaluator"), str):
        record["evaluator"] = raw["evaluator"]
    gold = gold_of(raw)
    if not gold.is_empty():
        record["gold"] = gold.model_dump(mode="json")
    record["x_lengths"] = text_lengths(raw)
    return record


class RunFile:
    """A results file opened for a run under ``selection``: the ids it holds and its run record.

    Attributes:
        out: the results file; done: ids finished cleanly; errored: ids whose rows have an error
            (run again); record: its run record (None for a new file or ``overwrite``).

    Raises (on opening):
        ResultsFileError: it has rows but no run record, rows of another selection, or rows while
            ``debias`` is ``"batch"``. DataError: a line in the middle or the record is not JSON.
    """

    def __init__(self, out: Path, selection: Mapping[str, Any], *, overwrite: bool = False) -> None:
        self.out = out
        self.selection = dict(selection)
        self.done, self.errored = (set(), set()) if overwrite else scan_results(out)
        self.record: dict[str, Any] | None = None if overwrite else read_run_record(out)
        if self.existing and self.record is None:
            raise ResultsFileError(
                f"{out} has rows but no run record ({run_record_path(out).name}), so what produced them is "
                f"unknown. {AFRESH} to start {out.name} afresh."
            )
        if self.existing and self.record is not None:
            if diffs := selection_differences(self.record.get("selection") or {}, self.selection):
                raise _refusal(out, diffs)
        if self.existing and self.selection.get("debias") == "batch":
            raise ResultsFileError(
                f"--debias batch divides each question's prior over all rows in one run, so {out} (it has "
                f"rows) cannot be resumed. {AFRESH} to start {out.name} afresh."
            )

    @property
    def existing(self) -> bool:
        """The file has rows (it is resumed)."""
        return bool(self.done or self.errored)

    def knows(self, model_flags: Mapping[str, Any]) -> bool:
        """These model flags (or this server) were seen to give the recorded engine."""
        return self.existing and self.record is not None and dict(model_flags) in (self.record.get("model_flags") or [])

    def accept_engine(self, engine: Mapping[str, Any], model_flags: Mapping[str, Any]) -> None:
        """Check ``engine`` against the recorded one; record ``model_flags`` as giving it.

        Raises:
            ResultsFileError: the file's rows came from another engine (:func:`engine_differences`).
        """
        if not self.existing or self.record is None:
            return
        if diffs := engine_differences(self.record.get("engine") or {}, engine):
            raise _refusal(self.out, diffs)
        if not self.knows(model_flags):
            flags = [*(self.record.get("model_flags") or []), dict(model_flags)]
            self.record = {**self.record, "model_flags": flags}
            write_run_record(self.out, self.record)

    def start(
        self, *, data: str, model_flags: Mapping[str, Any], engine: Mapping[str, Any] | None, ids: Sequence[str]
    ) -> ResultsWriter:
        """A writer appending to the file; a new file (or ``overwrite``) gets its run record first.

        Raises:
            DataError: the file cannot be read back (a line in the middle is not JSON).
        """
        if not self.existing:
            self.out.unlink(missing_ok=True)
            write_run_record(
                self.out,
                {
                    "format": RUN_RECORD_FORMAT,
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "data": data,
                    "selection": self.selection,
                    "model_flags": [dict(model_flags)],  # every flag set seen to give this engine
                    "engine": None if engine is None else dict(engine),
                },
            )
        return ResultsWriter(self.out, retry_errors=set(ids))
