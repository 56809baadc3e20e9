"""``logitjudge.client`` from Python against the real app over a scripted engine (loopback, in a
thread): the rows, run record and summary of ``logitjudge evaluate --server``, the resume of a
file either of them made, errors raised as exceptions, and ``ask`` answering as ``Judge.ask``.
The same on the suite's real model: ``test_evaluate_server.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.background import serve_in_thread
from test_evaluate_server_faults import EVALUATE, EVALUATORS, ROWS, Faults, _free_port, _rows, _run, make_judge

from logitjudge.client import (
    ENGINE_KEYS,
    ResultsFileError,
    ServerClient,
    ServerFailedError,
    ServerRefusedError,
    ServerUnreachableError,
    ask,
    evaluate,
)
from logitjudge.contract.systemone import SystemOneRequest
from logitjudge.errors import EngineError, RequestError
from logitjudge.server.app import create_app

FLAGS = ["--evaluators", EVALUATORS, "--threshold", "faithfulness=0.4", "--batch-size", "3"]
KWARGS: dict[str, Any] = {"thresholds": {"faithfulness": 0.4}, "batch_size": 3}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


@pytest.fixture
def server() -> Iterator[str]:
    with serve_in_thread(create_app(make_judge())) as url:
        yield url


def _record(out: Path) -> dict[str, Any]:
    return json.loads(Path(f"{out}.run.json").read_text(encoding="utf-8"))


def test_evaluate_from_python_writes_the_rows_record_and_summary_of_the_cli(server, data, tmp_path, capsys):
    by_cli, by_python = tmp_path / "cli.jsonl", tmp_path / "python.jsonl"
    status, err = _run(capsys, data, by_cli, *FLAGS, "--server", server)
    assert status == 0, err
    lines: list[str] = []
    run = evaluate(server, data, EVALUATORS, out=by_python, notify=lines.append, **KWARGS)
    assert _rows(by_python) == _rows(by_cli)
    assert run.rows == _rows(by_cli)  # the data's order
    assert [r["id"] for r in run.rows] == [r["id"] for r in ROWS]
    cli_record, python_record = _record(by_cli), _record(by_python)
    for key in ("selection", "model_flags", "engine", "format"):
        assert python_record[key] == cli_record[key], key
    assert python_record["model_flags"] == [{"server": server}]
    summary = json.loads(Path(f"{by_cli}.summary.json").read_text(encoding="utf-8"))["summary"]
    assert {k: v.model_dump(mode="json") for k, v in run.summary.items()} == summary
    assert run.summary["faithfulness"].n == len(ROWS)
    assert run.engine == cli_record["engine"] and run.engine is not None and run.engine["model"] == "scripted"
    assert run.server is not None and run.server.url == server and run.out == by_python
    assert (run.resumed, run.retried, run.ran, run.invalid) == (0, 0, len(ROWS), 0)
    assert lines[0].startswith(f"evaluating through {server}: scripted")


def test_without_a_results_file_the_rows_are_kept_in_memory(server, data, tmp_path, capsys):
    by_cli = tmp_path / "cli.jsonl"
    assert _run(capsys, data, by_cli, *FLAGS, "--server", server)[0] == 0
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    run = evaluate(server, rows, EVALUATORS.split(","), **KWARGS)
    assert run.out is None and run.rows == _rows(by_cli)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["data.jsonl", "cli.jsonl", "cli.jsonl.run.json", "cli.jsonl.summary.json"]
    )


def test_python_resumes_a_file_the_cli_began_and_refuses_another_selection(server, data, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert _run(capsys, data, out, *FLAGS, "--server", server)[0] == 0
    whole = _rows(out)
    out.write_text("".join(json.dumps(r) + "\n" for r in whole[:3]), encoding="utf-8")
    lines: list[str] = []
    run = evaluate(server, data, EVALUATORS, out=out, notify=lines.append, **KWARGS)
    assert (run.resumed, run.ran) == (3, len(ROWS) - 3)
    assert f"resumed 3 of {len(ROWS)} rows from {out}" in lines
    assert _rows(out) == whole and run.rows == whole
    before = out.read_bytes()
    with pytest.raises(ResultsFileError, match="--evaluators: faithfulness now, "):
        evaluate(server, data, "faithfulness", out=out, **KWARGS)
    with pytest.raises(ResultsFileError, match="faithfulness threshold: 0.6 now, 0.4 in the file"):
        evaluate(server, data, EVALUATORS, out=out, thresholds={"faithfulness": 0.6}, batch_size=3)
    assert out.read_bytes() == before
    run = evaluate(server, data, "faithfulness", out=out, overwrite=True)
    assert run.resumed == 0 and [set(r["results"]) for r in _rows(out)] == [{"faithfulness"}] * len(ROWS)


def test_a_server_failing_every_retry_raises_and_the_same_call_resumes(server, data, tmp_path):
    transport = Faults(server)
    busy = httpx.Response(503, json={"detail": {"error_type": "overloaded_error", "message": "draining"}})
    transport.queue[EVALUATE] = [None, busy, busy]
    sleeps: list[float] = []
    lines: list[str] = []
    out = tmp_path / "o.jsonl"
    client = ServerClient(
        "http://lj.test",
        retries=1,
        engine_keys=ENGINE_KEYS,
        notify=lines.append,
        transport=httpx.MockTransport(transport),
        sleep=sleeps.append,
    )
    with client:
        with pytest.raises(ServerFailedError, match=r"answered 503 \(overloaded_error: draining\) after 2 attempts"):
            evaluate(client, data, "faithfulness", out=out, batch_size=3)
        assert isinstance(ServerFailedError("x"), EngineError)
        assert [r["id"] for r in _rows(out)] == ["r0", "r1", "r2"]  # the first call's rows are kept
        assert len(sleeps) == 1 and any("retrying in" in line for line in lines)
        run = evaluate(client, data, "faithfulness", out=out, batch_size=3)
    transport.real.close()
    assert (run.resumed, run.ran) == (3, len(ROWS) - 3)
    assert [r["id"] for r in _rows(out)] == [r["id"] for r in ROWS]


def test_an_unreachable_server_raises_before_any_file_is_made(data, tmp_path):
    out = tmp_path / "o.jsonl"
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ServerUnreachableError, match=f"cannot reach the server at {url}: cannot connect"):
        evaluate(url, data, "faithfulness", out=out)
    assert not out.exists() and not Path(f"{out}.run.json").exists()
    with pytest.raises(ValueError, match="expected an http"):
        evaluate("127.0.0.1:8000", data, "faithfulness")


def test_the_api_key_is_the_argument_or_the_environment(data, monkeypatch):
    monkeypatch.delenv("LOGITJUDGE_API_KEY", raising=False)
    with serve_in_thread(create_app(make_judge(), api_keys=["k-1"])) as url:
        with pytest.raises(ServerRefusedError, match=r"refused the API key \(401") as refused:
            evaluate(url, data, "faithfulness", limit=1)
        assert refused.value.status == 401 and isinstance(refused.value, RequestError)
        assert evaluate(url, data, "faithfulness", limit=1, api_key="k-1").ran == 1
        monkeypatch.setenv("LOGITJUDGE_API_KEY", "k-1")
        assert evaluate(url, data, "faithfulness", limit=2).ran == 2


BODY = {
    "model": "jev-latest",
    "state": "I was charged twice. Refund the duplicate, please.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Is a refund requested?"},
        "tone": {"type": "choice", "instructions": "The tone?", "criteria": {"calm": None, "angry": None}},
    },
}


def test_ask_answers_as_the_servers_judge(server):
    answer = ask(server, BODY)
    assert answer == make_judge().ask(BODY)
    assert 0.0 <= answer["answers"]["refund"]["noul"] <= 1.0
    with ServerClient(server) as client:
        assert client.ask(BODY) == answer  # one client, many calls
        assert client.ask(SystemOneRequest.model_validate(BODY)) == answer
        with pytest.raises(ServerRefusedError, match=r"refused the request \(400\)") as unknown:
            client.ask({**BODY, "model": "no-such-model"})
        assert unknown.value.status == 400
        with pytest.raises(ServerRefusedError, match=r"\(422\)") as invalid:
            client.ask({**BODY, "questions": {}})
        assert invalid.value.field[:1] == ("questions",)


def test_ask_losing_the_server_says_so_without_the_evaluate_rows_wording():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    sleeps: list[float] = []
    client = ServerClient("http://lj.test", retries=1, transport=httpx.MockTransport(refuse), sleep=sleeps.append)
    lost_it = r"lost the server at http://lj.test: .*2 attempts"
    with client, pytest.raises(ServerUnreachableError, match=lost_it) as lost:
        client.ask(BODY)
    assert "rows" not in lost.value.message and len(sleeps) == 1


def test_an_invalid_row_is_named_by_its_id_written_with_its_error_and_announced(server, tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[1] = {**rows[1], "question": 5}  # not a typed question: this row only is refused
    lines: list[str] = []
    run = evaluate(server, rows, EVALUATORS.split(","), out=tmp_path / "o.jsonl", notify=lines.append, **KWARGS)
    bad = next(r for r in run.rows if r["id"] == str(rows[1]["id"]))
    assert bad["results"] == {} and bad["error"].startswith(
        f"InvalidRequestError: row {str(rows[1]['id'])!r}: question"
    )
    assert run.invalid == 1 and run.ran == len(ROWS) - 1
    notice = next(line for line in lines if line.startswith(f"1 of {len(ROWS)} rows cannot be evaluated"))
    assert "none is in the summary" in notice and f"first: InvalidRequestError: row {str(rows[1]['id'])!r}" in notice
