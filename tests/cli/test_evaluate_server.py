"""``logitjudge evaluate --server`` against a real ``logitjudge serve`` on the suite's model.

One ``logitjudge serve`` subprocess (the embedded SmolLM2-135M, ``LOGITJUDGE_MODEL`` of
``tests/conftest.py``; an API key from its environment; a free port) serves the module. The local
runs load the same model with the same (default) settings in this process, so the scores must
agree: within 1e-6 (float32 forwards of the same requests; the server may batch them with other
items' requests), and the option mass within 1e-4. Misbehaving servers (retries, refusals,
resume after a failure) are in ``test_evaluate_server_faults.py``. ``logitjudge.client`` from Python
gives the rows of the ``--server`` command (and ``ask`` the answers of the local judge); on a
scripted engine: ``test_client.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from logitjudge.cli.evaluate import main
from logitjudge.client import ENGINE_KEYS, ask, evaluate

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "rag_sample.jsonl"
KEY = "evaluate-server-key-4d2c"
SCORE_TOLERANCE = 1e-6
MASS_TOLERANCE = 1e-4


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``logitjudge serve`` on a free port, auth on (``LOGITJUDGE_API_KEYS``), strings capped at 2,000."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(LOGITJUDGE_API_KEYS=KEY)
    env.pop("LOGITJUDGE_API_KEYS_FILE", None)
    cmd = [sys.executable, "-m", "logitjudge.cli", "serve", "--port", str(port), "--max-text-chars", "2000"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while not _healthy(url):
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the server did not start in 600 s"
                time.sleep(0.5)
            yield url
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGITJUDGE_API_KEY", KEY)


def _run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str]:
    status = main([*map(str, argv), "--no-progress"])
    return status, capsys.readouterr().err


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "an id twice"
    return by_id


def _differences(a: Any, b: Any, path: str, out: dict[str, list[tuple[float, str]]]) -> None:
    """Collect |a - b| of every number by kind ("mass" for x_option_mass, else "score"); anything
    else (keys, statuses, labels, verdicts, token counts) must be equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: {sorted(set(a) ^ set(b or {}))}"
        for k in a:
            _differences(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) or isinstance(b, float):
        out["mass" if path.endswith("x_option_mass") else "score"].append((abs(a - b), path))
    else:
        assert a == b, f"{path}: {a!r} here, {b!r} through the server"


def test_scores_through_the_server_equal_a_local_run(served, with_key, tmp_path, capsys):
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    flags = [SAMPLE, "--threshold", "faithfulness=0.52", "--batch-size", "4"]  # auto: each row's evaluator
    status, err = _run(capsys, *flags, "--out", local)
    assert status == 0, err
    status, err = _run(capsys, *flags, "--out", remote, "--server", served)
    assert status == 0, err
    assert f"evaluating through {served}: smollm2-135m-instruct, fingerprint" in err
    here, there = _rows(local), _rows(remote)
    assert list(there) == list(here)  # every row, in the file's order
    diffs: dict[str, list[tuple[float, str]]] = {"score": [], "mass": []}
    for rid in here:
        _differences(here[rid], there[rid], rid, diffs)
    worst = {kind: max(d, default=(0.0, "-")) for kind, d in diffs.items()}
    with capsys.disabled():  # the figure, for the record (pytest -s)
        print(f"\nmax |local - server|: scores {worst['score'][0]:.3g}, option mass {worst['mass'][0]:.3g}")
    assert len(diffs["score"]) > 50
    assert worst["score"][0] <= SCORE_TOLERANCE, worst
    assert worst["mass"][0] <= MASS_TOLERANCE, worst
    # the run record holds the server's engine as a local run holds its own
    engine_here = json.loads(Path(f"{local}.run.json").read_text())["engine"]
    engine_there = json.loads(Path(f"{remote}.run.json").read_text())["engine"]
    assert engine_there["fingerprint"] and engine_there["prompt_version"]
    assert {k: engine_there.get(k) for k in ENGINE_KEYS} == {k: engine_here.get(k) for k in ENGINE_KEYS}
    # so a local file resumes through the server (and the other way): the engine is checked, not the flags
    rows = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    local.write_text("".join(line for line in local.read_text(encoding="utf-8").splitlines(keepends=True)[:7]))
    status, err = _run(capsys, *flags, "--out", local, "--server", served)
    assert status == 0, err
    assert f"resumed 7 of {len(rows)} rows" in err
    assert set(_rows(local)) == set(here)


def test_a_killed_run_resumes_with_every_row_once(served, with_key, tmp_path, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    rows = [{**r, "id": f"{r['id']}#{n}"} for n in range(2) for r in rows]  # 22 rows
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cmd = [sys.executable, "-m", "logitjudge.cli", "evaluate", str(data), "--out", str(out)]
    cmd += ["--server", served, "--batch-size", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while (not out.exists() or out.read_bytes().count(b"\n") < 2) and proc.poll() is None:
        assert time.monotonic() < deadline, "no rows written in 300 s"
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no clean-up, possibly half a line written
    proc.wait(timeout=60)
    assert proc.stderr is not None
    with proc.stderr:
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    written = out.read_bytes().count(b"\n")
    assert 2 <= written < len(rows), written
    status, err = _run(capsys, data, "--out", out, "--server", served, "--batch-size", "1")
    assert status == 0, err
    assert f"resumed {written} of {len(rows)} rows" in err
    lines = out.read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert sorted(ids) == sorted(r["id"] for r in rows)  # every row, none twice
    assert all(not json.loads(line).get("error") for line in lines)


def test_a_row_the_server_refuses_is_an_error_row_and_the_others_run(served, with_key, tmp_path, capsys):
    data, out = tmp_path / "data.jsonl", tmp_path / "out.jsonl"
    first = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    rows = [first, {**first, "id": "too-long", "output": "word " * 500}]  # 2,500 characters > --max-text-chars
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    status, err = _run(capsys, data, "--out", out, "--server", served)
    assert status == 0, err
    by_id = _rows(out)
    assert by_id[first["id"]]["results"]["faithfulness"]["status"] == "ok"
    refused = by_id["too-long"]["results"]["faithfulness"]
    assert refused["status"] == "error"
    assert "refused the item (422): output: a string may have at most 2000 characters" in refused["reason"]


def test_a_run_without_the_servers_key_is_refused_before_any_file_is_made(served, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LOGITJUDGE_API_KEY", raising=False)
    out = tmp_path / "out.jsonl"
    status, err = _run(capsys, SAMPLE, "--out", out, "--server", served)
    assert status == 2, err
    assert "refused the API key (401 authentication_error" in err
    assert not out.exists()


def _worst(here: dict[str, Any], there: dict[str, Any]) -> dict[str, float]:
    """The largest |difference| of the scores and of the option masses (all else must be equal)."""
    diffs: dict[str, list[tuple[float, str]]] = {"score": [], "mass": []}
    _differences(here, there, "", diffs)
    assert len(diffs["score"]) > 10
    return {kind: max(d, default=(0.0, "-"))[0] for kind, d in diffs.items()}


def test_the_python_client_gives_the_rows_and_summary_of_the_cli(served, with_key, tmp_path, capsys):
    by_cli, by_python = tmp_path / "cli.jsonl", tmp_path / "python.jsonl"
    status, err = _run(capsys, SAMPLE, "--threshold", "faithfulness=0.52", "--out", by_cli, "--server", served)
    assert status == 0, err
    run = evaluate(served, SAMPLE, out=by_python, thresholds={"faithfulness": 0.52}, batch_size=4)
    here, there = _rows(by_cli), _rows(by_python)
    assert list(there) == list(here) == [r["id"] for r in run.rows]
    assert run.rows == list(there.values())
    worst = _worst(here, there)
    with capsys.disabled():
        print(f"\nmax |cli - python|: scores {worst['score']:.3g}, option mass {worst['mass']:.3g}")
    assert worst["score"] <= SCORE_TOLERANCE and worst["mass"] <= MASS_TOLERANCE, worst
    cli_record = json.loads(Path(f"{by_cli}.run.json").read_text())
    python_record = json.loads(Path(f"{by_python}.run.json").read_text())
    assert python_record["engine"] == cli_record["engine"] and python_record["selection"] == cli_record["selection"]
    summary = json.loads(Path(f"{by_cli}.summary.json").read_text())["summary"]
    assert set(run.summary) == set(summary)
    for name, s in run.summary.items():
        assert (s.n, s.skipped, s.errors) == tuple(summary[name][k] for k in ("n", "skipped", "errors"))
        cli_metrics = {m["name"]: m.get("value") for m in summary[name]["metrics"]}
        assert set(cli_metrics) == {m.name for m in s.metrics} and "mean_score" in cli_metrics
        for m in s.metrics:
            if m.value is None or cli_metrics[m.name] is None:
                assert m.value == cli_metrics[m.name], (name, m.name)
            else:
                assert abs(m.value - cli_metrics[m.name]) <= SCORE_TOLERANCE, (name, m.name)


def test_ask_through_the_server_answers_as_the_local_judge(served, with_key, default_judge):
    body = {
        "model": "jev-latest",
        "state": "I was charged twice for my order. Please refund the duplicate.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
            "team": {"type": "choice", "instructions": "Which team?", "criteria": {"Billing": None, "Shipping": None}},
        },
    }
    there, here = ask(served, body), default_judge.ask(body)
    assert there["usage"] == here["usage"] and set(there["answers"]) == {"refund", "team"}
    assert abs(there["answers"]["refund"]["noul"] - here["answers"]["refund"]["noul"]) <= SCORE_TOLERANCE
    assert there["answers"]["team"]["choice"] == here["answers"]["team"]["choice"]
    for option, p in here["answers"]["team"]["probabilities"].items():
        assert abs(there["answers"]["team"]["probabilities"][option] - p) <= SCORE_TOLERANCE
