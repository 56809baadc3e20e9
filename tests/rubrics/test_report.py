"""The HTML report of ``logitjudge evaluate``: the model that produced the rows and a per-item table.

Regression: the report said "model: default" instead of the served model and had no per-item
rows. The same page from a real run is checked in ``test_evaluate_real_model.py``.
"""

from __future__ import annotations

from logitjudge.rubrics import report
from logitjudge.rubrics.aggregate import summarize

ENGINE = {
    "model": "smollm2-135m-instruct",
    "fingerprint": "a2d3a93f3b08e883257e0502779b631a78d6519a8dbd0a497bb99f2f0a057e2c",
    "prompt_version": "lj-prompt-1.1",
    "dtype": "float32",
    "calibration": None,
}

ROWS = [
    {
        "id": "item<1>",
        "results": {
            "faithfulness": {"status": "ok", "score": 0.8, "passed": True, "x_option_mass": 0.0019},
            "context_recall": {"status": "skipped", "reason": "missing required field `expected`"},
        },
        "gold": {"passed": {"faithfulness": False}},
    },
    {
        "id": "item-2",
        "results": {"faithfulness": {"status": "ok", "score": 0.2, "passed": False, "x_option_mass": 0.6}},
    },
    {"id": "item-3", "results": {}, "passed": None, "error": "InvalidRequestError: no evaluator"},
]


def _page(engine=ENGINE):
    return report.build_report(summarize(ROWS), ROWS, title="t", meta={"data": "d.jsonl"}, engine=engine)


def test_the_report_names_the_model_and_its_fingerprint():
    page = _page()
    assert "smollm2-135m-instruct (fingerprint a2d3a93f3b08)" in page
    assert "lj-prompt-1.1" in page
    assert ">default<" not in page
    assert report.model_line(None).startswith("unknown")


def test_the_report_has_one_row_per_item_and_evaluator_with_gold_and_the_low_mass_flag():
    page = _page()
    items = page[page.index("<h2>Items</h2>") :]
    assert "item&lt;1&gt;" in items and "item<1>" not in items  # escaped
    low_row = next(line for line in items.splitlines() if "item&lt;1&gt;" in line and "faithfulness" in line)
    assert "class='low miss'" in low_row and "⚠ low" in low_row and "should fail" in low_row
    assert "0.0019" in low_row
    ok_row = next(line for line in items.splitlines() if "item-2" in line)
    assert "⚠" not in ok_row and "class=" not in ok_row.split("<td", 1)[0]
    assert "missing required field `expected`" in items  # the skip reason
    assert "InvalidRequestError: no evaluator" in items  # an item-level error row
    assert "1 result(s) with option mass under 0.05" in page
    assert "low_option_mass" in page  # the metric in the evaluator's table
    assert "<script" not in page
