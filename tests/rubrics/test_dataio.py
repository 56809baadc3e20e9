"""Dataset and results files: list cells of CSV tables, error rows that a resume retries, run records.

Regression (list cells): a RAGAS ``contexts`` cell as pandas' ``to_csv`` writes a list,
``"['chunk a', 'chunk b']"``, was read as one chunk, brackets included.
"""

from __future__ import annotations

import json
import sys

import pytest

from logitjudge.rubrics import dataio
from logitjudge.rubrics.dataio import DataError, ResultsWriter, read_rows


def _csv(tmp_path, cell: str, column: str = "contexts"):
    path = tmp_path / "d.csv"
    quoted = '"' + cell.replace('"', '""') + '"'
    path.write_text(f"question,answer,{column}\nq,a,{quoted}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "cell",
    [
        "['chunk a', \"it's chunk b\"]",  # pandas' to_csv of a Python list
        '["chunk a", "it\'s chunk b"]',  # a JSON array
        "  ['chunk a', \"it's chunk b\"]  ",
    ],
)
def test_list_cells_of_a_csv_are_lists(tmp_path, cell):
    (row,) = read_rows(_csv(tmp_path, cell))
    assert row["contexts"] == ["chunk a", "it's chunk b"]


def test_list_cells_are_decoded_without_pandas_too(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    (row,) = read_rows(_csv(tmp_path, "['x', 'y']", column="retrieved_contexts"))
    assert row["retrieved_contexts"] == ["x", "y"]


def test_text_that_is_not_a_list_stays_one_chunk(tmp_path):
    (row,) = read_rows(_csv(tmp_path, "[1] The paper says so."))
    assert row["contexts"] == "[1] The paper says so."
    assert read_rows(_csv(tmp_path, "plain text"))[0]["contexts"] == "plain text"


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("[1, 2]", "must be a string"),
        ("['a', ['b']]", "must be a string"),
        ("['a', None]", "must be a string"),
        ("[true]", "must be a string"),
        ("['a' 'b', ]x]", "neither a JSON array nor a Python list literal"),
        ("[__import__('os').system('touch PWNED')]", "neither a JSON array nor a Python list literal"),
    ],
)
def test_a_list_cell_that_is_not_a_list_of_strings_names_the_row_and_column(tmp_path, monkeypatch, cell, why):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "d.csv"
    path.write_text(
        "question,answer,contexts\nq,a,\"['fine']\"\nq,a," + '"' + cell.replace('"', '""') + '"\n', encoding="utf-8"
    )
    with pytest.raises(DataError, match=why) as info:
        read_rows(path)
    assert "data row 2" in str(info.value) and "column `contexts`" in str(info.value)
    assert not (tmp_path / "PWNED").exists(), "never eval"


def test_json_arrays_may_hold_objects_as_structured_chunks():
    assert dataio.parse_list_cell('[{"title": "t", "text": "x"}]', where="w") == [{"title": "t", "text": "x"}]
    assert dataio.parse_list_cell(["already", "a list"], where="w") == ["already", "a list"]
    assert dataio.parse_list_cell(None, where="w") is None


def test_error_rows_are_removed_and_retried_and_clean_rows_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [
        {"id": "ok", "results": {"faithfulness": {"status": "ok"}}},
        {"id": "unplanned", "results": {}, "error": "InvalidRequestError: no evaluator"},
        {"id": "engine", "results": {"faithfulness": {"status": "error", "reason": "ContextOverflowError"}}},
        {"id": "other", "results": {}, "error": "not in this run"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "partial", "res', encoding="utf-8")
    assert dataio.scan_results(path) == ({"ok"}, {"unplanned", "engine", "other"})
    w = ResultsWriter(path, retry_errors={"ok", "unplanned", "engine"})
    assert w.done == {"ok", "other"} and w.retried == {"unplanned", "engine"}
    assert w.dropped_partial == len('{"id": "partial", "res')
    w.write({"id": "engine", "results": {"faithfulness": {"status": "ok"}}})
    w.close()
    assert [r["id"] for r in dataio.results_rows(path)] == ["ok", "other", "engine"]
    assert not list(tmp_path.glob("*.tmp"))


def test_without_retry_errors_the_writer_keeps_every_row(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "results": {}, "error": "x"}\n', encoding="utf-8")
    with ResultsWriter(path) as w:
        assert w.done == {"a"} and not w.retried
    assert path.read_text() == '{"id": "a", "results": {}, "error": "x"}\n'


def test_run_record_round_trip(tmp_path):
    out = tmp_path / "r.jsonl"
    assert dataio.read_run_record(out) is None
    written = dataio.write_run_record(out, {"selection": {"evaluators": "auto"}, "engine": {"fingerprint": "f"}})
    assert written.name == "r.jsonl.run.json"
    assert dataio.read_run_record(out) == {"selection": {"evaluators": "auto"}, "engine": {"fingerprint": "f"}}
    written.write_text("[1]")
    with pytest.raises(DataError, match="not a JSON object"):
        dataio.read_run_record(out)


@pytest.mark.parametrize(
    ("name", "text"),
    [("e.jsonl", ""), ("blank.jsonl", "\n  \n\n"), ("header.csv", "question,answer\n"), ("e.csv", "")],
)
def test_a_file_without_rows_is_an_error_naming_it(tmp_path, name, text):
    """An empty input is a mistake (a wrong path, a failed export), not an evaluation of nothing."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=rf"{name}: no rows"):
        read_rows(path)
    assert read_rows(path, limit=0) == []  # asked for none


def test_evaluate_stops_on_a_file_without_rows(tmp_path):
    import subprocess

    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "logitjudge.cli", "evaluate", str(path), "--evaluators", "RAG", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "empty.jsonl: no rows" in done.stderr
    assert not out.exists()
