"""``logitjudge evaluate`` end to end in subprocesses: results, summary, report, and resume after a kill.

The judge is built by ``lj_factories`` (a scripted engine): these tests check the command's file
handling and resume logic, not the model.
"""

from __future__ import annotations

import functools
import json
import logging
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
    # a PYTHONPATH already set (another checkout under test) comes before this one
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(HERE.parent), env.get("PYTHONPATH", ""), str(ROOT)) if p
    )
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _cmd(data, out, *extra, factory="lj_factories:make_judge"):
    return [
        sys.executable,
        "-m",
        "logitjudge.cli.evaluate",
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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
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
    external = ("<script src", "src='http", 'src="http', "href='http", 'href="http')
    assert not any(e in html for e in external)  # one self-contained file
    assert html.count("<details class='item") == len(sample_ids)  # every item, to debug from


def test_ctrl_c_stops_with_one_line_and_the_rows_kept(tmp_path):
    """SIGINT (Ctrl-C) mid-run: exit 130, one line saying how to resume, no traceback."""
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    # 400 items of 0.15 s each (a minute): the run is still going when the signal comes, even on a
    # machine loaded enough to starve this loop for seconds (60 items once finished first); the
    # test itself stops at the signal, so the count costs nothing
    rows = [{"id": f"i{i}", "input": f"q {i}", "output": f"a {i}", "context": [f"c {i}"]} for i in range(400)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = _cmd(data, out, "--evaluators", "faithfulness", "--batch-size", "1", factory="lj_factories:make_slow_judge")
    # a suite started in the background (`make check &`) inherits SIGINT ignored, and Python then
    # installs no Ctrl-C handler: the child gets the disposition a terminal gives it
    ctrl_c = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    with subprocess.Popen(
        cmd, env=_env(), cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=ctrl_c
    ) as proc:
        deadline = time.monotonic() + 240  # a guard against a hung child, not a timing assertion
        while not (out.exists() and out.read_bytes().count(b"\n") >= 2) and proc.poll() is None:
            assert time.monotonic() < deadline, "no rows written in 240 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    text = err.decode()
    assert proc.returncode == 130, text
    assert "interrupted; the rows written are kept in" in text and "run the same command again" in text
    assert "Traceback" not in text
    assert 2 <= len(_ids(out)) < len(rows)


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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
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
    assert proc.stderr is not None
    proc.stderr.close()
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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert "dropped a partial last line" in again.stderr
    assert f"resumed {len(first)} of {len(rows)} rows" in again.stderr
    ids = _ids(out)
    assert sorted(ids) == sorted(r["id"] for r in rows), "every id exactly once"
    assert len(ids) == len(set(ids))
    assert out.read_text().splitlines()[: len(first_rows)] == first_rows, "finished rows untouched"
    summary = json.loads((tmp_path / "out.jsonl.summary.json").read_text())
    assert summary["run"]["done_before"] == len(first)
    assert summary["summary"]["faithfulness"]["n"] == len(rows)
    # a third run has nothing left to do and loads no model
    third = subprocess.run(
        _cmd(data, out, "--evaluators", "faithfulness"),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
        timeout=300,
    )
    assert third.returncode == 0, third.stderr
    assert f"resumed {len(rows)} of {len(rows)} rows" in third.stderr
    assert json.loads((tmp_path / "out.jsonl.summary.json").read_text())["run"]["model_loaded"] is False
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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
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
        cwd=HERE,  # not the repo root: `-m` puts the cwd first on sys.path
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


# -- in-process runs (scripted judge): resume hygiene, run records, the one model loader -----------


def _evaluate(capsys, data, out, *extra, factory="lj_factories:make_judge"):
    """``logitjudge evaluate`` in this process: (exit status, stdout, stderr)."""
    from logitjudge.cli.evaluate import main

    argv = [str(data), "--out", str(out), "--no-progress", *map(str, extra)]
    if factory:
        argv += ["--judge-factory", factory]
    status = main(argv)
    cap = capsys.readouterr()
    return status, cap.out, cap.err


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _rows(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_auto_without_an_evaluator_field_fails_fast_before_the_model_loads(tmp_path, capsys):
    """Regression: rows without `evaluator` under the default `auto` exited 0 with an empty table
    and the error only inside the results file, which then poisoned every resume."""
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(data, [{"id": f"r{i}", "output": "a", "context": ["c"]} for i in range(3)])
    # a --model that cannot load: reaching the loader would exit 1, not 2
    status, _, err = _evaluate(capsys, data, out, "--model", tmp_path / "no-such-model", factory=None)
    assert status == 2, err
    assert "`evaluator`" in err and "--evaluators" in err
    assert not out.exists() and not Path(str(out) + ".run.json").exists()


def test_mixed_auto_file_warns_and_its_error_rows_are_retried_on_resume(tmp_path, capsys):
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    rows = [
        {"id": "a", "evaluator": "faithfulness", "output": "x", "context": ["c"]},
        {"id": "b", "output": "y", "context": ["c"]},  # no evaluator
    ]
    _write_jsonl(data, rows)
    status, _, err = _evaluate(capsys, data, out)
    assert status == 0, err
    assert "1 of 2 rows have no `evaluator` field" in err and "--evaluators" in err
    assert "error" in {r["id"]: r for r in _rows(out)}["b"]
    # the row is fixed in the data; the same command retries it instead of "resuming" the error
    rows[1]["evaluator"] = "faithfulness"
    _write_jsonl(data, rows)
    status, _, err = _evaluate(capsys, data, out)
    assert status == 0, err
    assert "resumed 1 of 2 rows" in err and "retrying 1 rows that had errors" in err
    by_id = {r["id"]: r for r in _rows(out)}
    assert [r["id"] for r in _rows(out)] == ["a", "b"], "each id once"
    assert "error" not in by_id["b"] and by_id["b"]["results"]["faithfulness"]["status"] == "ok"


def test_another_selection_on_an_existing_out_is_refused_before_loading_unless_overwrite(tmp_path, capsys):
    """Regression: changing --evaluators on an existing --out silently re-printed old results."""
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(data, [{"id": f"r{i}", "input": "q", "output": "a", "context": ["c"]} for i in range(2)])
    assert _evaluate(capsys, data, out, "--evaluators", "faithfulness")[0] == 0
    before = out.read_bytes()
    # the factory cannot be imported: the refusal must come before any loading
    status, _, err = _evaluate(capsys, data, out, "--evaluators", "RAG", factory="no_such_module:x")
    assert status == 2, err
    assert "--evaluators: RAG now, faithfulness in the file" in err and "--overwrite" in err
    status, _, err = _evaluate(
        capsys, data, out, "--evaluators", "faithfulness", "--threshold", "faithfulness=0.9", factory="nope:x"
    )
    assert status == 2 and "faithfulness threshold: 0.9 now, 0.5 in the file" in err
    assert out.read_bytes() == before
    status, _, err = _evaluate(capsys, data, out, "--evaluators", "RAG", "--overwrite")
    assert status == 0, err
    assert "resumed" not in err
    assert [r["id"] for r in _rows(out)] == ["r0", "r1"]
    assert all("chunk_relevance" in r["results"] for r in _rows(out))
    record = json.loads(Path(str(out) + ".run.json").read_text())
    assert record["selection"]["requested"] == ["RAG"] and "chunk_support" in record["selection"]["evaluators"]


def test_a_results_file_without_a_run_record_is_not_resumed(tmp_path, capsys):
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(data, [{"id": "r0", "output": "a", "context": ["c"]}])
    _write_jsonl(out, [{"id": "r0", "results": {}, "passed": None}])
    status, _, err = _evaluate(capsys, data, out, "--evaluators", "faithfulness", factory="no_such_module:x")
    assert status == 2 and "no run record" in err and "--overwrite" in err


def test_another_engine_on_an_existing_out_is_refused(tmp_path, capsys):
    """The engine check (model, fingerprint, prompt version, dtype, calibration) runs once the
    model is loaded: here a new row needs it, and the file came from another engine."""
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    _write_jsonl(data, [{"id": "r0", "output": "a", "context": ["c"]}])
    assert _evaluate(capsys, data, out, "--evaluators", "faithfulness")[0] == 0
    record_path = Path(str(out) + ".run.json")
    record = json.loads(record_path.read_text())
    record["engine"]["model"] = "another-model"
    record_path.write_text(json.dumps(record))
    _write_jsonl(data, [{"id": "r0", "output": "a", "context": ["c"]}, {"id": "r1", "output": "b", "context": ["c"]}])
    status, _, err = _evaluate(capsys, data, out, "--evaluators", "faithfulness")
    assert status == 2 and "model: scripted now, another-model in the file" in err
    assert _ids(out) == ["r0"]


def test_pandas_style_list_cells_of_a_ragas_csv_are_chunks(tmp_path, capsys):
    """Regression: `"['chunk a', 'chunk b']"` (pandas' to_csv of a list) was one chunk, brackets included."""
    csv_path = tmp_path / "ragas.csv"
    csv_path.write_text(
        "question,answer,contexts\n"
        '"Who wrote Hamlet?","Shakespeare.","[\'Hamlet is a tragedy.\', ""It\'s by Shakespeare.""]"\n',
        encoding="utf-8",
    )
    out = tmp_path / "o.jsonl"
    status, _, err = _evaluate(capsys, csv_path, out, "--evaluators", "chunk_relevance")
    assert status == 0, err
    (row,) = _rows(out)
    assert len(row["results"]["chunk_relevance"]["details"]) == 2


def test_model_flags_reach_judge_load_from_every_subcommand(tmp_path, capsys, monkeypatch):
    """Regression: evaluate's own copy of the loader dropped --attn and --max-num-batched-tokens.
    evaluate, calibrate, ask and serve all load through logitjudge.cli.load_judge."""
    from support.scripted import ScriptedEngine

    from logitjudge.cli import main
    from logitjudge.engine.config import VllmConfig
    from logitjudge.judge import Judge

    calls = []

    class Engine(ScriptedEngine):
        def describe(self):
            return {**super().describe(), "fingerprint": "f", "prompt_version": "p"}

    def fake_load(cls, model=None, **kwargs):
        calls.append({"model": model, **kwargs})
        return cls(Engine())

    monkeypatch.setattr(Judge, "load", classmethod(fake_load))
    flags = ["--model", "m", "--device", "cpu", "--dtype", "float32", "--strategy", "separate"]
    flags += ["--attn", "eager", "--engine-row-tokens", "1234", "--rotations", "3"]
    flags += ["--backend", "transformers", "--tensor-parallel-size", "2", "--block-size", "64", "--kv-cache-gib", "3"]
    flags += ["--state-cache-mb", "77", "--prompt-version", "lj-prompt-2", "--heads", "none", "--adapters", "a1,a2"]
    want = {
        "model": "m",
        "device": "cpu",
        "dtype": "float32",
        "strategy": "separate",
        "attn": "eager",
        "max_row_tokens": 1234,  # Judge.load's name of the engine row budget
        "calibration": "shipped",  # the default: the shipped calibration fitted for this engine, if any
        "default_rotations": 3,
        "backend": "transformers",
        "vllm": VllmConfig(tensor_parallel_size=2, block_size=64, kv_cache_gib=3),  # the vLLM flags too
        "state_cache_mb": 77,
        "prompt_version": "lj-prompt-2",
        "heads": "none",
        "adapters": "a1,a2",  # Judge.load splits a comma-separated list
    }
    data = tmp_path / "d.jsonl"
    row = {"evaluator": "faithfulness", "output": "a", "context": ["c"]}
    _write_jsonl(data, [{**row, "id": f"s:{i}", "gold": {"faithful": i % 2 == 0}} for i in range(4)])
    assert main(["evaluate", str(data), "--out", str(tmp_path / "o.jsonl"), "--no-progress", *flags]) == 0
    main(["calibrate", str(data), "--out", str(tmp_path / "cal.json"), *flags])  # a 4-row fit may refuse
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul"}}}))
    assert main(["ask", str(request), *flags]) == 0
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    from logitjudge.cli import serve as serve_cli  # serve runs uvicorn.Server through _run_uvicorn

    monkeypatch.setattr(serve_cli, "_run_uvicorn", lambda config, started: None)
    package_logger = logging.getLogger("logitjudge")
    level = package_logger.level  # run_serve sets it from --log-level
    try:
        assert main(["serve", "--port", "8123", "--log-level", "warning", *flags]) == 0
    finally:
        package_logger.setLevel(level)
    capsys.readouterr()
    assert len(calls) == 4
    evaluate, calibrate, ask, serve = calls
    for call in (evaluate, ask, serve):
        assert call == want
    assert calibrate == {**want, "calibration": "none"}  # calibrate fits on raw distributions
