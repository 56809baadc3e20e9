"""Dataset files in, results files out: reading rows, and an append-only, resumable results file.

Reading: JSONL (one object per line; blank lines skipped), CSV (pandas if installed, else the
standard ``csv`` module), Parquet (pandas). In CSV and Parquet files a list column (``context``,
``contexts``, ``retrieved_contexts``, ``ground_truths``) may hold its list as text, either as a
JSON array (``["chunk a", "chunk b"]``) or as the Python list literal pandas' ``to_csv`` writes
(``['chunk a', 'chunk b']``, parsed with :func:`ast.literal_eval`, never ``eval``). A cell that
starts with ``[`` and ends with ``]`` must be such a list of strings (JSON arrays may also hold
objects, structured chunks); anything else there is a :class:`DataError` naming the row and the
column. Any other text is one chunk.

Writing (:class:`ResultsWriter`): one JSON line per finished item, each written with a single
``write`` of the full line (newline included) on an ``O_APPEND`` descriptor, then ``fsync``, so a
crash leaves at most one partial final line and never a duplicated or reordered one. Opening an
existing file reads the ids already finished; a trailing partial line (no newline, or not JSON)
is cut off before anything new is appended. Re-running with the same ``--out`` therefore skips
finished ids, loses nothing and duplicates nothing. Rows with an error (a top-level ``error``, or
an evaluator result with ``status: "error"``) do not count as finished: opened with
``retry_errors``, the writer removes those rows (an atomic rewrite of the file: temporary file,
fsync, rename) so they run again and each id stays in the file once.

Run records (:func:`run_record_path`, ``<out>.run.json``): what produced a results file
(evaluator selection, thresholds, model flags, the engine's model, fingerprint, prompt version,
dtype and calibration), written atomically when the file is created; ``logitjudge evaluate``
refuses to resume a file under another configuration (see :mod:`logitjudge.cli.evaluate`).
"""

from __future__ import annotations

import ast
import csv
import json
import math
import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "read_rows",
    "row_id",
    "ResultsWriter",
    "DataError",
    "LIST_COLUMNS",
    "parse_list_cell",
    "is_error_row",
    "scan_results",
    "results_rows",
    "run_record_path",
    "read_run_record",
    "write_run_record",
]

LIST_COLUMNS = ("context", "contexts", "retrieved_contexts", "ground_truths")
"""Columns of CSV/Parquet files whose text cells may hold a list (see the module docstring)."""


class DataError(ValueError):
    """A dataset or results file cannot be read as rows (names the file and line)."""


def _finite(value: Any) -> Any:
    """NaN cells of pandas frames (missing values) become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: a row must be a JSON object")
            yield row


def parse_list_cell(value: Any, *, where: str) -> Any:
    """A table cell of a list column: list text -> a list of strings; other values unchanged.

    ``where`` names the cell in errors (``"data.csv: data row 3, column `contexts`"``).

    Raises:
        DataError: the cell looks like a list (``[...]``) but is neither a JSON array nor a
            Python list literal, or an element is not a string (JSON arrays: or an object).
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return value
    try:
        decoded = json.loads(text)
        allowed: tuple[type, ...] = (str, dict)  # JSON objects are structured chunks, as in JSONL
    except json.JSONDecodeError:
        try:
            decoded = ast.literal_eval(text)  # literals only: no names, calls or attributes
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise DataError(
                f"{where}: starts with '[' and ends with ']' but is neither a JSON array nor a "
                "Python list literal of strings (write one chunk without the brackets, or a list "
                'such as ["chunk a", "chunk b"])'
            ) from None
        allowed = (str,)
    if not isinstance(decoded, list):
        raise DataError(f"{where}: expected a list of strings, got {type(decoded).__name__}")
    for x in decoded:
        if not isinstance(x, allowed):
            raise DataError(f"{where}: every element of the list must be a string, got {x!r}")
    return decoded


def _lists_decoded(rows: Iterator[dict[str, Any]], path: Path) -> Iterator[dict[str, Any]]:
    for i, row in enumerate(rows):
        for col in LIST_COLUMNS:
            if col in row:
                row[col] = parse_list_cell(row[col], where=f"{path}: data row {i + 1}, column `{col}`")
        yield row


def _read_table(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    try:
        import pandas as pd
    except ImportError:
        if kind == "parquet":
            raise DataError(f"{path}: reading Parquet needs pandas and pyarrow (pip install pandas pyarrow)") from None
        with path.open("r", encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                yield {k: (v if v != "" else None) for k, v in row.items()}
        return
    try:
        frame = pd.read_parquet(path) if kind == "parquet" else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return  # no columns at all: read_rows reports a file without rows
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: not a readable CSV table ({exc})") from None
    for record in frame.to_dict(orient="records"):
        yield {str(k): _finite(v.tolist() if hasattr(v, "tolist") else v) for k, v in record.items()}


def read_rows(path: str | Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all when None) of a ``.jsonl``/``.json``/``.csv``/``.parquet`` file.

    Raises:
        DataError: unreadable file, a line that is not a JSON object, a malformed list cell
            (named by row and column), a missing reader, or no rows at all (unless ``limit``
            is 0).
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, not a data file")
    suffix = p.suffix.lower()
    rows: Iterator[dict[str, Any]]
    if suffix in (".csv", ".tsv"):
        rows = _lists_decoded(_read_table(p, "csv"), p)
    elif suffix in (".parquet", ".pq"):
        rows = _lists_decoded(_read_table(p, "parquet"), p)
    else:
        rows = _read_jsonl(p)
    out: list[dict[str, Any]] = []
    try:
        for row in rows:
            if limit is not None and len(out) >= limit:
                break
            out.append(row)
    except UnicodeDecodeError as exc:
        raise DataError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not out and limit != 0:
        raise DataError(f"{p}: no rows (the file is empty or holds only blank lines)")
    return out


def row_id(row: dict[str, Any], index: int) -> str:
    """A row's id as a string: its ``id`` field, else ``row-<index>`` (0-based position in the file)."""
    value = row.get("id")
    return str(value) if value is not None and value != "" else f"row-{index}"


def is_error_row(row: Mapping[str, Any]) -> bool:
    """True when a results row did not finish cleanly: a top-level ``error`` (the row could not
    be planned) or an evaluator result with ``status: "error"`` (the engine failed it)."""
    if row.get("error"):
        return True
    results = row.get("results")
    return isinstance(results, Mapping) and any(
        isinstance(r, Mapping) and r.get("status") == "error" for r in results.values()
    )


def _complete_lines(path: Path, data: bytes) -> tuple[list[tuple[bytes, dict[str, Any] | None]], int]:
    """(complete lines with their parsed row, byte offset after the last good line).

    A trailing partial line (no newline, or not JSON) ends the scan.

    Raises:
        DataError: a line in the middle is not JSON.
    """
    lines: list[tuple[bytes, dict[str, Any] | None]] = []
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if data[good + len(line) :].strip():
                raise DataError(f"{path}: a line in the middle is not JSON; not resuming over it") from None
            break
        lines.append((line, row if isinstance(row, dict) else None))
        good += len(line)
    return lines, good


def scan_results(path: str | Path) -> tuple[set[str], set[str]]:
    """(ids finished cleanly, ids whose row has an error) of a results file, without changing it.

    A missing file gives two empty sets; an id with both a clean and an error row counts as clean.

    Raises:
        DataError: a line in the middle is not JSON.
    """
    p = Path(path)
    if not p.exists():
        return set(), set()
    lines, _ = _complete_lines(p, p.read_bytes())
    done: set[str] = set()
    errored: set[str] = set()
    for _, row in lines:
        if row is not None and "id" in row:
            (errored if is_error_row(row) else done).add(str(row["id"]))
    return done, errored - done


def results_rows(path: str | Path) -> list[dict[str, Any]]:
    """The complete rows of a results file, in file order ([] when it does not exist); a trailing
    partial line is left out, and the file is never changed.

    Raises:
        DataError: a line in the middle is not JSON.
    """
    p = Path(path)
    if not p.exists():
        return []
    lines, _ = _complete_lines(p, p.read_bytes())
    return [row for _, row in lines if row is not None]


class ResultsWriter:
    """Append-only JSONL results, one fsynced line per item; resumable.

    Args:
        retry_errors: ids whose error rows (:func:`is_error_row`) are removed at open so that
            they run again; their ids are not in ``done``.

    Attributes:
        done: ids already present in the file when it was opened (or written since).
        dropped_partial: bytes of a trailing partial line cut off at open (0 when none).
        retried: ids whose error rows were removed at open.
    """

    def __init__(self, path: str | Path, *, retry_errors: Collection[str] = ()) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        self.retried: set[str] = set()
        self.dropped_partial = 0
        if self.path.exists():
            self._recover(set(map(str, retry_errors)))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _recover(self, retry: set[str]) -> None:
        data = self.path.read_bytes()
        lines, good = _complete_lines(self.path, data)
        kept: list[bytes] = []
        for line, row in lines:
            rid = str(row["id"]) if row is not None and "id" in row else None
            if rid is not None and rid in retry and is_error_row(row or {}):
                self.retried.add(rid)
                continue
            if rid is not None:
                self.done.add(rid)
            kept.append(line)
        self.retried -= self.done  # an id that also has a clean row stays done
        if self.retried:
            self._replace(b"".join(kept))
            self.dropped_partial = len(data) - good
        elif good < len(data):
            self.dropped_partial = len(data) - good
            with self.path.open("r+b") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())

    def _replace(self, content: bytes) -> None:
        """Atomically replace the file with ``content`` (temporary file, fsync, rename, fsync dir)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)

    def write(self, row: dict[str, Any]) -> None:
        """Append ``row`` (which must have an ``id``) as one line: one write, then fsync."""
        line = (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        view = memoryview(line)
        while view:  # a regular file takes the whole buffer in one write; loop only on a short write
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        self.done.add(str(row["id"]))

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self) -> list[dict[str, Any]]:
        """Every row in the file, in file order."""
        return list(_read_jsonl(self.path))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_record_path(out: str | Path) -> Path:
    """Where the run record of results file ``out`` lives: ``<out>.run.json``."""
    p = Path(out)
    return p.with_name(p.name + ".run.json")


def read_run_record(out: str | Path) -> dict[str, Any] | None:
    """The run record of results file ``out``, or None when there is none.

    Raises:
        DataError: the record exists but is not a JSON object.
    """
    p = run_record_path(out)
    if not p.exists():
        return None
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{p}: cannot read the run record ({exc})") from None
    if not isinstance(record, dict):
        raise DataError(f"{p}: the run record is not a JSON object")
    return record


def write_run_record(out: str | Path, record: Mapping[str, Any]) -> Path:
    """Write the run record of ``out`` atomically (temporary file, fsync, rename); returns its path."""
    p = run_record_path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)
    _fsync_dir(p.parent)
    return p
