"""Dataset files in, results files out: reading rows, and an append-only, resumable results file.

Reading: JSONL (one object per line; blank lines skipped), CSV (pandas if installed, else the
standard ``csv`` module; list cells such as RAGAS ``contexts`` as JSON text), Parquet (pandas).

Writing (:class:`ResultsWriter`): one JSON line per finished item, each written with a single
``write`` of the full line (newline included) on an ``O_APPEND`` descriptor, then ``fsync``, so a
crash leaves at most one partial final line and never a duplicated or reordered one. Opening an
existing file reads the ids already finished; a trailing partial line (no newline, or not JSON)
is cut off before anything new is appended. Re-running with the same ``--out`` therefore skips
finished ids, loses nothing and duplicates nothing.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["read_rows", "row_id", "ResultsWriter", "DataError"]


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


def _read_table(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    try:
        import pandas as pd
    except ImportError:
        if kind == "parquet":
            raise DataError(
                f"{path}: reading Parquet needs pandas and pyarrow (pip install pandas pyarrow)"
            ) from None
        with path.open("r", encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                yield {k: (v if v != "" else None) for k, v in row.items()}
        return
    frame = pd.read_parquet(path) if kind == "parquet" else pd.read_csv(path)
    for record in frame.to_dict(orient="records"):
        yield {str(k): _finite(v.tolist() if hasattr(v, "tolist") else v) for k, v in record.items()}


def read_rows(path: str | Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows (all when None) of a ``.jsonl``/``.json``/``.csv``/``.parquet`` file.

    Raises:
        DataError: unreadable file, a line that is not a JSON object, or a missing reader.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file")
    suffix = p.suffix.lower()
    rows: Iterator[dict[str, Any]]
    if suffix in (".csv", ".tsv"):
        rows = _read_table(p, "csv")
    elif suffix in (".parquet", ".pq"):
        rows = _read_table(p, "parquet")
    else:
        rows = _read_jsonl(p)
    out = []
    for row in rows:
        if limit is not None and len(out) >= limit:
            break
        out.append(row)
    return out


def row_id(row: dict[str, Any], index: int) -> str:
    """A row's id as a string: its ``id`` field, else ``row-<index>`` (0-based position in the file)."""
    value = row.get("id")
    return str(value) if value is not None and value != "" else f"row-{index}"


class ResultsWriter:
    """Append-only JSONL results, one fsynced line per item; resumable.

    Attributes:
        done: ids already present in the file when it was opened (or written since).
        dropped_partial: bytes of a trailing partial line cut off at open (0 when none).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        self.dropped_partial = 0
        if self.path.exists():
            self._recover()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _recover(self) -> None:
        data = self.path.read_bytes()
        good = 0  # byte offset after the last complete, valid line
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if data[good + len(line) :].strip():
                    raise DataError(
                        f"{self.path}: a line in the middle is not JSON; not resuming over it"
                    ) from None
                break
            if isinstance(row, dict) and "id" in row:
                self.done.add(str(row["id"]))
            good += len(line)
        if good < len(data):
            self.dropped_partial = len(data) - good
            with self.path.open("r+b") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())

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
