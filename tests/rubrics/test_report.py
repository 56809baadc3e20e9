"""The HTML report of ``logitjudge evaluate``: the model that produced the rows, and every item to debug from
(texts, verdicts, per-chunk verdicts, gold, flags), checked through its DOM (stdlib ``html.parser``).

Regression: the report said "model: default" instead of the served model and had no per-item
rows. The same page from a real run is checked in ``test_evaluate_real_model.py``.
"""

from __future__ import annotations

from html.parser import HTMLParser

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


SOURCES = {
    "item<1>": {
        "id": "item<1>",
        "input": "Who wrote <Hamlet>?",
        "output": "Shakespeare wrote it. He was English.",
        "context": ["Hamlet is a play by William Shakespeare & co.", "Unrelated <b>chunk</b>."],
        "expected": "William Shakespeare",
    },
    "item-2": {"id": "item-2", "question": "2+2?", "answer": "4", "contexts": ["arithmetic"]},
}


class _Page(HTMLParser):
    """The report's DOM, as much as the checks need: item blocks, result rows, chunk tables, script."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.items: list[dict[str, object]] = []
        self.scripts: list[str] = []
        self.external: list[str] = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        for key in ("src", "href"):
            if key in a and not a[key].startswith(("data:", "#")):
                self.external.append(a[key])
        if tag == "details" and "item" in a.get("class", "").split():
            self.items.append({"class": a["class"], "rows": [], "text": "", "chunk_rows": 0})
        elif tag == "tr" and "result" in a.get("class", "").split() and self.items:
            self.items[-1]["rows"].append(a)  # type: ignore[union-attr]
        elif tag == "table" and a.get("class") == "chunks" and self.items:
            self.items[-1]["chunk_rows"] = self.items[-1]["chunk_rows"] - 1  # type: ignore[operator]  # header row
        elif tag == "tr" and self.items and any(t == "table" and x.get("class") == "chunks" for t, x in self.stack):
            self.items[-1]["chunk_rows"] += 1  # type: ignore[operator]
        self.in_script = tag == "script"
        if tag not in ("br", "img", "input", "meta"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass
        self.in_script = False

    def handle_data(self, data):
        if self.in_script:
            self.scripts.append(data)
        elif self.items:
            self.items[-1]["text"] += data  # type: ignore[operator]


def _dom(**kwargs) -> _Page:
    page = _Page()
    page.feed(report.build_report(summarize(ROWS), ROWS, title="t", meta={}, engine=ENGINE, **kwargs))
    return page


def test_every_item_is_a_block_with_its_texts_verdicts_gold_and_flags():
    dom = _dom(sources=SOURCES)
    assert len(dom.items) == 3
    first, second, third = dom.items
    assert "miss" in first["class"] and "low" in first["class"]  # disagrees with gold; option mass 0.0019
    text = first["text"]
    for needle in ("Who wrote <Hamlet>?", "Shakespeare wrote it.", "Unrelated <b>chunk</b>.", "William Shakespeare"):
        assert needle in text  # the texts, unescaped by the parser: they were escaped in the page
    assert "should fail" in text and "✗ gold" in text and "⚠ low" in text
    assert [r["data-ev"] for r in first["rows"]] == ["faithfulness"]  # the skipped one is not a row...
    assert "1 skipped" in text and "missing required field `expected`" in text  # ...but one collapsed line
    assert first["rows"][0]["data-status"] == "passed" and first["rows"][0]["data-miss"] == "1"
    assert "2+2?" in second["text"] and "arithmetic" in second["text"]  # RAGAS names
    assert "miss" not in second["class"] and second["rows"][0]["data-status"] == "failed"
    assert "InvalidRequestError: no evaluator" in third["text"]
    assert dom.external == []  # one offline file
    assert len(dom.scripts) == 1 and "f-ev" in dom.scripts[0]


def test_per_chunk_verdicts_show_their_probabilities_and_the_chunk_text():
    rows = [
        {
            "id": "c1",
            "results": {
                "chunk_support": {
                    "status": "ok",
                    "score": 0.5,
                    "label": "1 supports, 1 unrelated",
                    "passed": True,
                    "details": [
                        {"index": 0, "label": "supports", "score": 1.0, "probabilities": {"supports": 0.81}},
                        {"index": 1, "label": "unrelated", "score": 0.0, "probabilities": {"unrelated": 0.66}},
                    ],
                }
            },
        }
    ]
    page = report.build_report(
        summarize(rows), rows, title="t", meta={}, sources={"c1": {"output": "x", "context": ["alpha <1>", "beta"]}}
    )
    dom = _Page()
    dom.feed(page)
    assert dom.items[0]["chunk_rows"] == 2
    assert "supports=0.81" in page and "unrelated=0.66" in page
    assert "alpha &lt;1&gt;" in page and "alpha <1>" not in page


def test_located_verdicts_show_the_claim_and_the_chunk_that_decides_it():
    rows = [
        {
            "id": "f1",
            "results": {
                "faithfulness": {
                    "status": "ok",
                    "score": 0.3,
                    "passed": False,
                    "x_located_by": "chunk_support@4",
                    "x_located": [
                        {
                            "index": 0,
                            "label": "supported (chunk 1)",
                            "score": 0.9,
                            "passed": True,
                            "x_claim": "It opened in 1932.",
                            "x_chunk": 1,
                        },
                        {
                            "index": 1,
                            "label": "contradicted (chunk 0)",
                            "score": 0.2,
                            "passed": False,
                            "x_claim": "It is painted <red>.",
                            "x_chunk": 0,
                        },
                    ],
                }
            },
        }
    ]
    page = report.build_report(
        summarize(rows),
        rows,
        title="t",
        meta={},
        sources={"f1": {"output": "x", "context": ["Painted grey.", "Opened 1932."]}},
    )
    dom = _Page()
    dom.feed(page)
    assert dom.items[0]["chunk_rows"] == 2
    assert "<th>claim</th>" in page and "<th>deciding (or closest) chunk</th>" in page
    assert "It is painted &lt;red&gt;." in page and "contradicted (chunk 0)" in page
    assert "0: Painted grey." in page and "1: Opened 1932." in page


def test_small_samples_are_marked_and_intervals_shown():
    page = _page()
    assert f"fewer than {report.SMALL_N} items" in page and "⚠ n&lt;20" in page
    assert "95% interval" in page


def test_without_sources_the_report_says_the_texts_are_missing():
    assert "texts not available" in _page()
