"""``logitjudge compare``: two runs of the same items under different settings (scripted engines,
so the expected agreement can be computed independently from the scores each run wrote)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.scripted import ScriptedEngine

from logitjudge.cli import main
from logitjudge.judge import Judge
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.compare import compare_runs, read_results

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rag_sample.jsonl"


def _p(state) -> float:
    # a different yes-probability per item, from the item's own text
    return 0.05 + 0.9 * ((len(json.dumps(state)) * 37) % 100) / 100


def _run(tmp_path: Path, name: str, shift: float) -> Path:
    def script(state, question):
        if question.type == "noul":  # the shift moves P(yes) given the context, not the contrast twin's
            p = min(0.99, max(0.01, _p(state) + (shift if "context" in state else 0.0)))
            return [p, 1 - p]
        n = len(question.options)
        return [1.0 + shift] + [1.0] * (n - 1)

    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    run = evaluate(Judge(ScriptedEngine(script)), rows, ["faithfulness", "answer_relevancy"])
    path = tmp_path / f"{name}.jsonl"
    with path.open("w") as fh:
        for row, res in zip(rows, run.results):
            fh.write(json.dumps({**res.model_dump(mode="json", exclude_none=True), "id": row["id"]}) + "\n")
    return path


def test_identical_runs_agree_fully(tmp_path):
    a = read_results(_run(tmp_path, "a", 0.0))
    report = compare_runs(a, a)
    f = report["evaluators"]["faithfulness"]
    assert report["items"]["joined"] == len(a) == 11
    assert f["n"] + f["not_ok_on_a_side"] == 11
    assert f["pearson"] == pytest.approx(1.0) and f["spearman"] == pytest.approx(1.0)
    assert f["mean_abs_diff"] == 0.0 and f["decision_agreement"] == 1.0
    assert all(d["abs_diff"] == 0 for d in f["top_disagreements"])


def test_two_settings_compared_against_hand_computed_figures(tmp_path):
    a, b = read_results(_run(tmp_path, "a", 0.0)), read_results(_run(tmp_path, "b", 0.2))
    report = compare_runs(a, b, top=3)
    f = report["evaluators"]["faithfulness"]
    ok = [i for i in a if a[i]["results"]["faithfulness"]["status"] == "ok"]  # skipped: no context
    assert f["n"] == len(ok) >= 8
    sa = [a[i]["results"]["faithfulness"]["score"] for i in ok]
    sb = [b[i]["results"]["faithfulness"]["score"] for i in ok]
    pa = [a[i]["results"]["faithfulness"]["passed"] for i in ok]
    pb = [b[i]["results"]["faithfulness"]["passed"] for i in ok]
    assert f["mean_abs_diff"] == pytest.approx(sum(abs(x - y) for x, y in zip(sa, sb)) / len(sa))
    agree = sum(x == y for x, y in zip(pa, pb)) / len(pa)
    assert 0 < agree < 1  # the shift moves some items across the 0.5 threshold
    assert f["decision_agreement"] == pytest.approx(agree)
    m = f["confusion"]["matrix"]
    assert f["confusion"]["labels"] == ["True", "False"]
    assert m[0][0] + m[1][1] == sum(x == y for x, y in zip(pa, pb))
    assert m[1][0] == sum((not x) and y for x, y in zip(pa, pb))  # ours failed, theirs passed
    flips = [d for d in f["top_disagreements"] if d["ours_decision"] != d["theirs_decision"]]
    assert flips and f["top_disagreements"][0]["ours_decision"] != f["top_disagreements"][0]["theirs_decision"]
    assert f["spearman"] > 0.9  # a shift clipped at 0.99 keeps the ranking nearly intact
    assert "answer_relevancy" in report["evaluators"]


def test_cli_writes_report_and_plots(tmp_path, capsys):
    a, b = _run(tmp_path, "a", 0.0), _run(tmp_path, "b", 0.2)
    out, plots = tmp_path / "report.json", tmp_path / "plots"
    assert main(["compare", str(a), str(b), "--out", str(out), "--plots", str(plots)]) == 0
    report = json.loads(out.read_text())
    assert set(report["evaluators"]) == {"faithfulness", "answer_relevancy"}
    assert (plots / "faithfulness.png").stat().st_size > 1000
    assert "faithfulness" in capsys.readouterr().out


def test_cli_refuses_rows_without_results_or_ids(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(SAMPLE.read_text())  # data rows, not result rows
    res = _run(tmp_path, "a", 0.0)
    assert main(["compare", str(data), str(res)]) == 2
    no_id = tmp_path / "noid.jsonl"
    no_id.write_text(json.dumps({"results": {}}) + "\n")
    assert main(["compare", str(res), str(no_id)]) == 2
