"""A resumable evaluate run into a results file, whoever answers: :class:`ResumableRun`.

The steps, each its own call so that a caller (the ``evaluate`` command, or
:func:`logitjudge.client.evaluate`) can say what failed where:

1. :func:`setup_run`: the rows' ids, the evaluator selection, the results file opened (a resume
   under another selection is refused here, before anything is loaded or asked) and every row
   not yet done planned;
2. :meth:`ResumableRun.check_engine`: the :class:`Answerer` describes its engine (a local model
   loads, a server is asked), when there is work or the file's engine must be checked;
3. :meth:`ResumableRun.open`: the run record of a new file, the writer, the rows that cannot run;
4. :meth:`ResumableRun.answer`: every planned row answered and written as it finishes;
5. :meth:`ResumableRun.finish`: the file's rows of this data, for the summary.

Without a results file (``out=None``) nothing is resumed and the rows are kept in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from logitjudge.client.runfile import (
    Pending,
    RunFile,
    check_out,
    named,
    nothing_plannable,
    plan_rows,
    result_record,
    row_ids,
    selection_record,
)
from logitjudge.errors import InvalidRequestError
from logitjudge.rubrics.dataio import results_rows
from logitjudge.rubrics.registry import Registry, Selected

__all__ = ["Answerer", "RunSetup", "setup_run", "RunOutcome", "ResumableRun"]

Notify = Callable[[str], None]


class Answerer(Protocol):
    """What answers the planned rows of a run: a local judge, or a server.

    Attributes:
        model_flags: what the run record keeps of how the engine was chosen (the CLI's model
            flags, or ``{"server": URL}``).
    """

    model_flags: dict[str, Any]

    def engine(self) -> dict[str, Any]:
        """The engine's description (:data:`~logitjudge.client.runfile.ENGINE_KEYS` and more);
        loads the model or asks the server. Raises a LogitJudgeError when it cannot."""
        ...

    def results(self, pending: Sequence[Pending]) -> Iterator[tuple[int, Any]]:
        """``(position in pending, ItemResult or a server's record)`` for every row, as each finishes."""
        ...


@dataclass
class RunSetup:
    """A run planned (see :func:`setup_run`).

    Attributes:
        rows, ids: the data rows and their ids, in order; names: the evaluators as given;
        fixed: their selection (None for each row's own, ``auto``); thresholds: the overrides;
        selection: the run record's selection; file: the results file (None: kept in memory);
        pending: the rows to run; invalid: rows that cannot be planned (id, error, lacks an evaluator).
    """

    data: str
    rows: list[dict[str, Any]]
    ids: list[str]
    names: list[str]
    fixed: list[Selected] | None
    thresholds: dict[str, float]
    selection: dict[str, Any]
    file: RunFile | None
    pending: list[Pending]
    invalid: list[tuple[str, str, bool]]

    @property
    def resumed(self) -> list[str]:
        """Ids finished cleanly in the file before this run."""
        return [i for i in self.ids if self.file is not None and i in self.file.done]

    @property
    def retried(self) -> list[str]:
        """Ids whose error rows this run replaces."""
        return [i for i in self.ids if self.file is not None and i in self.file.errored]


def setup_run(
    rows: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    fixed: Sequence[Selected] | None,
    *,
    registry: Registry,
    thresholds: Mapping[str, float],
    out: Path | None,
    data: str,
    data_path: Path | None = None,
    overwrite: bool = False,
    debias: str = "none",
    notify: Notify | None = None,
) -> RunSetup:
    """Check the rows and the results file, and plan every row not done yet.

    Args:
        rows: the data rows (our field names or RAGAS names); names: the evaluators as given;
        fixed: their selection (``registry.select(names)``), or None for ``auto``;
        thresholds: validated overrides; out: the results file, or None; data: the data's name
        in messages and the run record; data_path: the data file (``out`` may not be it);
        notify: a line for a person about rows without an evaluator.

    Raises:
        InvalidRequestError: two rows share an id, or no row can run at all.
        ResultsFileError: ``out`` cannot be resumed or written (see :class:`~logitjudge.client.runfile.RunFile`).
        DataError: ``out`` or its record cannot be read.
    """
    table = [dict(r) for r in rows]
    ids = row_ids(table, data)
    if out is not None:
        check_out(out, data_path)
    selection = selection_record(registry, names, fixed, table, thresholds, debias)
    file = None if out is None else RunFile(out, selection, overwrite=overwrite)
    pending, invalid = plan_rows(registry, fixed, ids, table, file.done if file is not None else set())
    setup = RunSetup(
        data,
        table,
        ids,
        list(names),
        None if fixed is None else list(fixed),
        dict(thresholds),
        selection,
        file,
        pending,
        invalid,
    )
    if invalid and not pending and not setup.resumed:
        raise InvalidRequestError(nothing_plannable(data, invalid))
    lacking = [rid for rid, _, lacks in invalid if lacks]
    if lacking and notify is not None:
        notify(
            f"{len(lacking)} of {len(table)} rows have no `evaluator` field while --evaluators is auto "
            f"(first: {lacking[0]}); they are recorded as errors and retried on a resume: give them an "
            "`evaluator` field, or run every row with --evaluators NAMES (another --out, or --overwrite)"
        )
    return setup


@dataclass
class RunOutcome:
    """What a run did.

    Attributes:
        rows: the results rows of the data's ids (the latest row of each), in file order.
        engine: the engine the rows came from (this run's, else the run record's; None if unknown).
        ran: rows answered in this run; written: rows written in this run (invalid rows included).
        elapsed_s: seconds spent answering (0 when nothing ran).
    """

    rows: list[dict[str, Any]]
    engine: dict[str, Any] | None
    ran: int
    written: int
    elapsed_s: float


class _Memory:
    """The rows of a run without a results file."""

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []
        self.dropped_partial = 0

    def write(self, row: dict[str, Any]) -> None:
        self.kept.append(row)

    def close(self) -> None:
        pass


@dataclass
class ResumableRun:
    """One run of a :class:`RunSetup` with an :class:`Answerer` (the steps in the module docstring).

    Attributes:
        engine: the answerer's engine, once :meth:`check_engine` asked for it.
        written: rows written so far; ran: rows answered so far; elapsed_s: seconds :meth:`answer` took.
    """

    setup: RunSetup
    answerer: Answerer
    notify: Notify = field(default=lambda _line: None)
    engine: dict[str, Any] | None = None
    written: int = 0
    ran: int = 0
    elapsed_s: float = 0.0
    _writer: Any = None

    def check_engine(self) -> dict[str, Any] | None:
        """Ask the answerer for its engine when there is work, or when the file's engine must be
        checked for model flags (a server) not seen before; check it against the file's.

        Raises:
            ResultsFileError: the file's rows came from another engine; the answerer's errors
                (a model that cannot load, a server that cannot be reached or refuses the key).
        """
        file, flags = self.setup.file, self.answerer.model_flags
        if self.setup.pending or (file is not None and file.existing and not file.knows(flags)):
            self.engine = self.answerer.engine()
            if file is not None:
                file.accept_engine(self.engine, flags)
        return self.engine

    def open(self) -> None:
        """The writer (and a new file's run record), the notices of a resume, the invalid rows written.

        Raises:
            DataError: the results file cannot be read back.
        """
        setup, file = self.setup, self.setup.file
        if setup.pending or setup.invalid:
            if file is None:
                self._writer = _Memory()
            else:
                self._writer = file.start(
                    data=setup.data, model_flags=self.answerer.model_flags, engine=self.engine, ids=setup.ids
                )
                if self._writer.dropped_partial:
                    self.notify(f"dropped a partial last line ({self._writer.dropped_partial} bytes) of {file.out}")
        resumed, retried = setup.resumed, setup.retried
        if file is not None and (resumed or retried):
            self.notify(
                f"resumed {len(resumed)} of {len(setup.rows)} rows from {file.out}"
                + (f"; retrying {len(retried)} rows that had errors" if retried else "")
            )
        for rid, why, _ in setup.invalid:
            self._write({"id": rid, "results": {}, "passed": None, "error": why})
        if bad := [(rid, why) for rid, why, lacks in setup.invalid if not lacks]:  # lacking `evaluator`: told above
            kept = "written with its `error` and retried on a resume" if file is not None else "kept with its `error`"
            self.notify(
                f"{len(bad)} of {len(setup.rows)} rows cannot be evaluated; each is {kept}, and none is in the "
                f"summary (first: {named(*bad[0])})"
            )

    def _write(self, record: dict[str, Any]) -> None:
        self._writer.write(record)
        self.written += 1

    def answer(self, on_row: Callable[[dict[str, Any]], None] | None = None) -> int:
        """Answer every planned row and write it as it finishes (``on_row`` called with each
        record written); the writer is closed at the end, also on an error.

        Returns:
            The number of rows answered.

        Raises:
            The answerer's errors: the rows written before stay written.
        """
        pending = self.setup.pending
        started = time.monotonic()
        try:
            if pending:
                for k, res in self.answerer.results(pending):
                    rid, raw, _ = pending[k]
                    record = result_record(rid, raw, res)
                    self._write(record)
                    self.ran += 1
                    if on_row is not None:
                        on_row(record)
        finally:
            self.elapsed_s = time.monotonic() - started
            if self._writer is not None:
                self._writer.close()
        return self.ran

    def finish(self) -> RunOutcome:
        """The rows of the data's ids in the results file (the latest of each), and the engine."""
        file, wanted = self.setup.file, set(self.setup.ids)
        if file is not None:
            written = results_rows(file.out)
        else:
            written = self._writer.kept if isinstance(self._writer, _Memory) else []
        latest = {str(r.get("id")): r for r in written if str(r.get("id")) in wanted}
        engine = self.engine if self.engine is not None else ((file.record if file else None) or {}).get("engine")
        return RunOutcome(list(latest.values()), engine, self.ran, self.written, self.elapsed_s)
