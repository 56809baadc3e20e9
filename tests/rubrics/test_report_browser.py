"""The report's filters in a real headless browser (Chromium), on a small synthetic run.

Skipped where no ``chromium`` binary is installed (``make browser`` installs Debian's), unless
``LOGITJUDGE_TEST_BROWSER=1`` (CI sets it), where a missing browser fails; the DOM itself
is checked without a browser in ``test_report.py``. Filters are preset through the URL fragment
(``#ev=...&status=...``), the page's script applies them, and ``--dump-dom`` returns the DOM after
it ran: the items it hid carry the ``hidden`` attribute.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from logitjudge.rubrics import report
from logitjudge.rubrics.aggregate import summarize

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
REQUIRED = os.environ.get("LOGITJUDGE_TEST_BROWSER") == "1"
pytestmark = pytest.mark.skipif(CHROMIUM is None and not REQUIRED, reason="no chromium binary (make browser)")


def test_browser_is_installed_where_required():
    """With ``LOGITJUDGE_TEST_BROWSER=1`` (CI) a missing browser is a failure, not a skip."""
    assert CHROMIUM is not None, "LOGITJUDGE_TEST_BROWSER=1 but no chromium binary: run `make browser`"


ROWS = [
    {
        "id": "pass-agrees",
        "results": {"faithfulness": {"status": "ok", "score": 0.9, "passed": True, "x_option_mass": 0.5}},
        "gold": {"passed": {"faithfulness": True}},
    },
    {
        "id": "pass-disagrees",
        "results": {"faithfulness": {"status": "ok", "score": 0.7, "passed": True, "x_option_mass": 0.01}},
        "gold": {"passed": {"faithfulness": False}},
    },
    {
        "id": "fail-relevancy",
        "results": {"answer_relevancy": {"status": "ok", "score": 0.1, "passed": False, "x_option_mass": 0.4}},
    },
]
SOURCES = {"pass-agrees": {"output": "Paris is in France."}, "pass-disagrees": {"output": "Lyon."}}


def _visible(page_path, fragment: str) -> list[str]:
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--virtual-time-budget=2000",
            "--dump-dom",
            f"file://{page_path}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    blocks = re.findall(
        r"<details class=\"item[^\"]*\"( hidden=\"\")?><summary><span class=\"id\">([^<]+)<", proc.stdout
    )
    assert len(blocks) == len(ROWS), proc.stdout[:2000]
    return [rid for hidden, rid in blocks if not hidden]


def test_filters_hide_and_show_items_in_a_browser(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(report.build_report(summarize(ROWS), ROWS, title="t", meta={}, sources=SOURCES), encoding="utf-8")
    assert _visible(page, "") == ["pass-agrees", "pass-disagrees", "fail-relevancy"]
    assert _visible(page, "ev=faithfulness") == ["pass-agrees", "pass-disagrees"]
    assert _visible(page, "status=failed") == ["fail-relevancy"]
    assert _visible(page, "miss=1") == ["pass-disagrees"]
    assert _visible(page, "low=1") == ["pass-disagrees"]
    assert _visible(page, "text=paris") == ["pass-agrees"]  # the item's texts are searched
