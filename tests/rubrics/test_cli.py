"""``logitjudge evaluate`` end to end in subprocesses: results, summary, report, and resume after a kill.

The judge is built by ``lj_factories`` (a scripted engine): these tests check the command's file
handling and resume logic, not the model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logitjudge.rubrics.dataio import ResultsWriter

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "rag_sample.jsonl"
HERE = Path(__file__).resolve().parent


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _cmd(data, out, *extra, factory="lj_factories:make_judge"):
    return [
        sys.executable,
        "-m",
        "logitjudge.rubrics.cli",
        str(data),
        "--out",
        str(out),
        "--judge-factory",
        factory,
        "--no-progress",
        *extra,
    ]


def _ids(path):
    return [json.loads(line)["id"] for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_evaluate_sample_writes_results_summary_and_report(tmp_path):
    out, report = tmp_path / "r.jsonl", tmp_path / "r.html"
    proc = subprocess.run(
        _cmd(SAMPLE, out, "--evaluators", "RAG", "--report", str(report)),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    sample_ids = [json.loads(line)["id"] for line in SAMPLE.read_text().splitlines()]
    assert _ids(out) == sample_ids
    assert "logitjudge evaluate: summary" in proc.stdout and "chunk_support" in proc.stdout
    summary = json.loads((tmp_path / "r.jsonl.summary.json").read_text())
    assert summary["run"]["ran"] == len(sample_ids)
    assert summary["config"]["evaluators"] == ["RAG"]
    faith = summary["summary"]["faithfulness"]
    assert faith["n"] == 9 and faith["skipped"] == 2  # the two recall rows have no output
    assert {m["name"] for m in faith["metrics"]} >= {
        "mean_score",
        "pass_rate",
        "precision",
        "recall",
        "f1",
        "accuracy",
    }
    html = report.read_text()
    assert html.count("data:image/png;base64,") >= 7 and "reliability" in html
    assert "<script" not in html  # self-contained, static


def test_resume_after_kill_writes_every_id_exactly_once(tmp_path):
    data = tmp_path / "data.jsonl"
    rows = [
        {"id": f"item-{i}", "input": f"question {i}", "output": f"answer {i}", "context": [f"chunk {i}"]}
        for i in range(14)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        _cmd(
            data,
            out,
            "--evaluators",
            "faithfulness",
            "--batch-size",
            "1",
            factory="lj_factories:make_slow_judge",
        ),
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240  # a guard against a hung child, not a timing assertion
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_bytes().splitlines()) >= 3:
            break
        if proc.poll() is not None:
            pytest.fail(f"finished before it could be killed: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _ids(out)
    assert 3 <= len(first) < len(rows), "killed mid-run"
    first_rows = out.read_text().splitlines()
    # a crash can leave a partial last line; simulate the worst case
    with out.open("ab") as fh:
        fh.write(b'{"id": "item-99", "results": {"faithful')
    again = subprocess.run(
        _cmd(data, out, "--evaluators", "faithfulness"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert "dropped a partial last line" in again.stderr
    ids = _ids(out)
    assert sorted(ids) == sorted(r["id"] for r in rows), "every id exactly once"
    assert len(ids) == len(set(ids))
    assert out.read_text().splitlines()[: len(first_rows)] == first_rows, "finished rows untouched"
    summary = json.loads((tmp_path / "out.jsonl.summary.json").read_text())
    assert summary["run"]["done_before"] == len(first)
    assert summary["summary"]["faithfulness"]["n"] == len(rows)
    # a third run has nothing left to do and loads no model
    third = subprocess.run(
        _cmd(data, out, "--evaluators", "faithfulness", factory="no_such_module:x"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert third.returncode == 0, third.stderr
    assert _ids(out) == ids


def test_auto_evaluators_on_a_labelled_dev_set_and_ragas_csv(tmp_path):
    csv_path = tmp_path / "ragas.csv"
    csv_path.write_text(
        "question,answer,contexts,ground_truth\n"
        '"Who wrote Hamlet?","Shakespeare.",'
        '"[""Hamlet is a tragedy by William Shakespeare.""]","William Shakespeare"\n'
    )
    out = tmp_path / "csv.jsonl"
    proc = subprocess.run(
        _cmd(csv_path, out, "--evaluators", "faithfulness,context_recall"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["id"] == "row-0"
    assert row["results"]["faithfulness"]["status"] == "ok"
    assert row["results"]["context_recall"]["status"] == "ok"


def test_unknown_evaluator_fails_fast_with_did_you_mean(tmp_path):
    proc = subprocess.run(
        _cmd(SAMPLE, tmp_path / "x.jsonl", "--evaluators", "faithfullness"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "did you mean 'faithfulness'" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_duplicate_ids_are_refused(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": 1, "output": "a", "context": "c"}\n{"id": 1, "output": "b", "context": "c"}\n')
    proc = subprocess.run(
        _cmd(data, tmp_path / "o.jsonl", "--evaluators", "faithfulness"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 2 and "duplicate ids" in proc.stderr


def test_results_writer_refuses_a_corrupt_middle_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(ValueError, match="in the middle is not JSON"):
        ResultsWriter(path)


def test_results_writer_resume_state(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "res')
    w = ResultsWriter(path)
    assert w.done == {"a", "b"} and w.dropped_partial == len('{"id": "c", "res')
    w.write({"id": "c"})
    w.close()
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n'
