"""``logitjudge evaluate`` on the real default model: flags reach the engine, low option mass is
flagged, the report names the model, and a results file refuses another engine.

Regressions pinned here:

- evaluate's own copy of the loader dropped ``--attn`` and ``--max-num-batched-tokens`` (accepted,
  ignored): the engine's ``describe()`` in the summary shows what was loaded;
- at a long state ``x_option_mass`` falls to almost nothing (0.0019 at 8,192 tokens; about 0.02
  at the 1,565 tokens used here) and nothing said so;
- the HTML report said "model: default" and had no per-item table.

The model loads once for the module: ``Judge.load`` is wrapped so that a later call with the
same arguments gets the judge the first (real) call loaded.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from logitjudge.cli.evaluate import main
from logitjudge.judge import Judge

LOW_OPTION_MASS = 0.05  # logitjudge.settings.LOW_OPTION_MASS (checked in test_evaluate_option_mass.py)
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "rag_sample.jsonl"
FLAGS = ["--attn", "eager", "--engine-row-tokens", "4096"]
LONG = {"id": "long-state", "input": "a " * 1500, "question": {"type": "noul", "instructions": "Is it?"}}


@pytest.fixture(scope="module")
def loads():
    """Every ``Judge.load`` call's arguments; the first call with given arguments loads for real."""
    real = Judge.load.__func__
    cache: dict[str, Judge] = {}
    calls: list[dict] = []

    def load(cls, model=None, **kwargs):
        call = {"model": model, **kwargs}
        calls.append(call)
        key = json.dumps(call, sort_keys=True, default=str)
        if key not in cache:
            cache[key] = real(cls, model, **kwargs)
        return cache[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Judge, "load", classmethod(load))
        yield calls


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in argv])
    return SimpleNamespace(status=status, out=out.getvalue(), err=err.getvalue())


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def real_run(loads, tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    data, out, report = d / "data.jsonl", d / "r.jsonl", d / "r.html"
    first = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[0])  # faithfulness, with gold
    _write(data, [first, LONG])
    run = _run([data, "--out", out, "--report", report, "--no-progress", *FLAGS])
    assert run.status == 0, run.err
    summary = json.loads((d / "r.jsonl.summary.json").read_text())
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    return SimpleNamespace(dir=d, data=data, out=out, report=report, run=run, summary=summary, rows=rows)


def test_flags_given_to_evaluate_reach_the_loaded_engine(real_run, loads):
    assert loads[0]["attn"] == "eager" and loads[0]["max_row_tokens"] == 4096
    engine = real_run.summary["environment"]["engine"]
    assert engine["attn"] == "eager" and engine["max_row_tokens"] == 4096
    record = json.loads(Path(str(real_run.out) + ".run.json").read_text())
    assert record["engine"]["fingerprint"] == engine["fingerprint"] and record["engine"]["prompt_version"]


def test_low_option_mass_on_a_long_state_is_in_the_records_the_table_and_the_summary(real_run):
    long_mass = real_run.rows["long-state"]["results"]["typed_question"]["x_option_mass"]
    sample_mass = real_run.rows["halueval_qa:0:right"]["results"]["faithfulness"]["x_option_mass"]
    assert 0 < long_mass < LOW_OPTION_MASS < sample_mass <= 1
    metrics = {name: {m["name"]: m for m in s["metrics"]} for name, s in real_run.summary["summary"].items()}
    assert metrics["typed_question"]["low_option_mass"]["value"] == 1.0
    assert metrics["faithfulness"]["low_option_mass"]["value"] == 0.0
    assert real_run.summary["config"]["low_option_mass_threshold"] == LOW_OPTION_MASS
    assert "low mass" in real_run.run.out
    assert f"low option mass: typed_question: 1 of 1 answers under {LOW_OPTION_MASS}" in real_run.run.out


def test_the_report_names_the_served_model_and_flags_the_low_mass_item(real_run):
    engine = real_run.summary["environment"]["engine"]
    page = real_run.report.read_text(encoding="utf-8")
    assert f"{engine['model']} (fingerprint {engine['fingerprint'][:12]})" in page
    items = page[page.index("<h2>Items</h2>") :]
    long_row = next(line for line in items.splitlines() if "long-state" in line)
    assert "⚠ low" in long_row
    sample_row = next(line for line in items.splitlines() if "halueval_qa:0:right" in line)
    assert "⚠" not in sample_row and "should pass" in sample_row


def test_a_rerun_resumes_without_loading_the_model(real_run, loads, tmp_path):
    out = tmp_path / "r.jsonl"
    shutil.copy(real_run.out, out)
    shutil.copy(str(real_run.out) + ".run.json", str(out) + ".run.json")
    before = len(loads)
    run = _run([real_run.data, "--out", out, "--no-progress", *FLAGS])
    assert run.status == 0, run.err
    assert "resumed 2 of 2 rows" in run.err
    assert len(loads) == before
    assert json.loads((tmp_path / "r.jsonl.summary.json").read_text())["run"]["model_loaded"] is False


def test_a_results_file_from_another_fingerprint_is_refused(real_run, tmp_path):
    out, data = tmp_path / "r.jsonl", tmp_path / "data.jsonl"
    shutil.copy(real_run.out, out)
    record = json.loads(Path(str(real_run.out) + ".run.json").read_text())
    fingerprint = record["engine"]["fingerprint"]
    record["engine"]["fingerprint"] = "0" * 64
    Path(str(out) + ".run.json").write_text(json.dumps(record))
    _write(data, [*map(json.loads, real_run.data.read_text().splitlines()), {**LONG, "id": "new", "input": "b"}])
    before = out.read_bytes()
    run = _run([data, "--out", out, "--no-progress", *FLAGS])
    assert run.status == 2
    assert f"fingerprint: {fingerprint[:12]}… now, 000000000000… in the file" in run.err
    assert "--overwrite" in run.err
    assert out.read_bytes() == before
