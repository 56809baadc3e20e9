"""What a terminal shows: plain ``--help`` text, and an evaluate summary that fits 80 columns."""

from __future__ import annotations

import random
import re

import pytest

from logitjudge.cli import build_parser
from logitjudge.cli.evaluate import print_table
from logitjudge.rubrics.aggregate import summarize


@pytest.mark.parametrize("command", [[], ["ask"], ["serve"], ["evaluate"], ["calibrate"], ["compare"]])
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:" not in text and ":func:" not in text
    if command in (["ask"], ["serve"], ["evaluate"], ["calibrate"]):
        assert "--allow-download" in text


def _rows(n: int = 30):
    rng = random.Random(0)
    rows = []
    for i in range(n):
        results = {}
        for name in ("faithfulness", "context_entity_recall", "answer_relevancy", "chunk_support"):
            score = rng.random()
            results[name] = {"status": "ok", "score": score, "passed": score > 0.5, "x_option_mass": rng.random()}
        gold = {"passed": {"faithfulness": rng.random() < 0.5}}
        rows.append({"id": str(i), "results": results, "gold": gold, "x_lengths": {"output": rng.randint(1, 99)}})
    return rows


def test_the_summary_fits_80_columns_and_wide_shows_every_metric(capsys):
    summary = summarize(_rows())
    print_table(summary)
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80, narrow
    assert "faithfulness" in narrow and "context_entity_recall" in narrow and "AUROC" in narrow
    assert "--wide" in narrow  # the columns left out are named as such
    print_table(summary, wide=True)
    wide = capsys.readouterr().out
    assert "len AUROC" in wide and "  P " in wide and re.search(r"\d\.\d{3} ", wide)  # every column, 3 decimals


def test_the_skip_and_err_columns_are_explained_when_they_count_rows(capsys):
    rows = _rows(6)
    print_table(summarize(rows))
    assert "skip:" not in capsys.readouterr().out  # nothing skipped: no note
    rows[0]["results"]["faithfulness"] = {"status": "skipped", "reason": "no retrieved context"}
    rows[1]["results"]["chunk_support"] = {"status": "error", "reason": "boom"}
    print_table(summarize(rows))
    out = capsys.readouterr().out
    assert "skip: rows the evaluator did not run" in out and "err: rows whose evaluation failed" in out
