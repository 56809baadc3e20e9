"""``logitjudge evaluate --server`` against a server that misbehaves: retries, refusals, resume.

The server is the real app over a scripted engine (fixed probabilities), on loopback in a
thread; faults are injected between the client and it by an ``httpx.MockTransport`` that
forwards every other call (:class:`Faults`), and the backoff's sleeps are recorded, not slept.
What the real model gives through a server is in ``test_evaluate_server.py``.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from support.background import serve_in_thread
from support.scripted import ScriptedEngine

import logitjudge.cli.evaluate as evaluate_cli
from logitjudge.client import ServerClient, normalize_url
from logitjudge.judge import Judge
from logitjudge.server.app import create_app
from logitjudge.server.errors import install_error_handlers
from logitjudge.server.evaluate_routes import include_evaluate_routes

ROOT = Path(__file__).resolve().parents[2]
EVALUATE = "/api/v1/evaluate"
EVALUATORS = "faithfulness,context_recall,chunk_relevance@1"  # explicit, a pinned version, a skip


def _script(state: Any, question: Any) -> list[float]:
    """Distinct, deterministic answers: they depend on the state and on the question."""
    n = len(question.options)
    if question.type == "continuation":
        return [0.01 + (len(str(state)) % 13) / 20]
    seed = (len(str(state)) * 7 + len(str(question.instructions or ""))) % 11
    if n == 2:
        p = 0.05 + 0.09 * seed
        return [p, 1 - p]
    return [1.0 + ((seed + i) % n) for i in range(n)]


def make_judge() -> Judge:
    """The judge of both sides (``--judge-factory test_evaluate_server_faults:make_judge``)."""
    return Judge(ScriptedEngine(_script))


ROWS = [
    {"id": f"r{i}", "input": f"question {i}?", "output": f"answer {'x' * i}", "context": [f"chunk {i}", "other"]}
    | ({"expected": f"gold {i}"} if i % 3 == 0 else {})
    for i in range(7)
]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


@pytest.fixture
def server() -> Iterator[str]:
    with serve_in_thread(create_app(make_judge())) as url:
        yield url


class Faults:
    """An ``httpx`` transport that answers from a per-path queue of faults, else forwards to ``url``.

    A queued entry is an ``httpx.Response`` (answered as is), an exception (raised, as a dropped
    connection is), a callable ``(request, real_response) -> Response`` (the real answer,
    changed), or None (forwarded unchanged).
    """

    def __init__(self, url: str) -> None:
        self.real = httpx.Client(base_url=url, timeout=60)
        self.queue: dict[str, list[Any]] = {}
        self.calls: list[tuple[str, str, int]] = []  # (method, path, items in the body)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        items = len(json.loads(request.content).get("items", [])) if request.content else 0
        self.calls.append((request.method, path, items))
        fault = self.queue.get(path, []).pop(0) if self.queue.get(path) else None
        if isinstance(fault, Exception):
            raise fault
        if isinstance(fault, httpx.Response):
            return fault
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        real = self.real.request(request.method, path, content=request.content, headers=headers)
        answer = httpx.Response(real.status_code, headers={"content-type": "application/json"}, content=real.content)
        return fault(request, answer) if callable(fault) else answer

    def posts(self) -> list[int]:
        """Items per ``POST /api/v1/evaluate``, in order."""
        return [n for method, path, n in self.calls if method == "POST" and path == EVALUATE]


@pytest.fixture
def faults(server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Faults, list[float]]]:
    """Every client the CLI makes goes through a :class:`Faults` to ``server``; sleeps are recorded."""
    transport = Faults(server)
    sleeps: list[float] = []
    client = functools.partial(ServerClient, transport=httpx.MockTransport(transport), sleep=sleeps.append)
    monkeypatch.setattr(evaluate_cli, "ServerClient", client)
    yield transport, sleeps
    transport.real.close()


def _run(capsys: pytest.CaptureFixture[str], data: Path, out: Path, *extra: Any) -> tuple[int, str]:
    """``logitjudge evaluate`` in this process: (exit status, stderr)."""
    status = evaluate_cli.main([str(data), "--out", str(out), "--no-progress", *map(str, extra)])
    return status, capsys.readouterr().err


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _rewrite(change: Callable[[dict[str, Any]], None]) -> Callable[[httpx.Request, httpx.Response], httpx.Response]:
    """A fault that changes the real answer's JSON body with ``change``."""

    def fault(_request: httpx.Request, real: httpx.Response) -> httpx.Response:
        body = real.json()
        change(body)
        return httpx.Response(real.status_code, json=body)

    return fault


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the same rows as a local run ------------------------------------------------------------------


def test_the_rows_and_the_engine_record_are_a_local_runs(server, data, tmp_path, capsys):
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    factory = f"{Path(__file__).stem}:make_judge"
    flags = ["--evaluators", EVALUATORS, "--threshold", "faithfulness=0.4", "--batch-size", "3"]
    status, err = _run(capsys, data, local, *flags, "--judge-factory", factory)
    assert status == 0, err
    status, err = _run(capsys, data, remote, *flags, "--server", server)
    assert status == 0, err
    assert f"evaluating through {server}: scripted" in err
    assert _rows(remote) == _rows(local)
    skipped = _rows(remote)[1]["results"]["context_recall"]
    assert skipped["status"] == "skipped" and "`expected`" in skipped["reason"]  # decided here, not sent
    record = json.loads((tmp_path / "remote.jsonl.run.json").read_text())
    assert record["engine"] == json.loads((tmp_path / "local.jsonl.run.json").read_text())["engine"]
    assert record["model_flags"] == [{"server": server}]
    summary = json.loads((tmp_path / "remote.jsonl.summary.json").read_text())
    assert summary["config"]["server"] == server and summary["run"]["model_loaded"] is False
    assert summary["environment"]["server"]["url"] == server


def test_rows_that_send_other_evaluators_start_a_new_call(faults, data, tmp_path, capsys):
    """Rows without `expected` send faithfulness and chunk_relevance@1 only (context_recall is
    skipped here); --batch-size consecutive rows that send the same evaluators share a call."""
    transport, _ = faults
    status, err = _run(
        capsys,
        data,
        tmp_path / "o.jsonl",
        "--evaluators",
        EVALUATORS,
        "--batch-size",
        "2",
        "--server",
        "http://lj.test",
    )
    assert status == 0, err
    # r0 (expected) | r1 r2 | r3 (expected) | r4 r5 | r6 (expected)
    assert transport.posts() == [1, 2, 1, 2, 1]


# -- retries ---------------------------------------------------------------------------------------


def test_overload_and_server_errors_are_retried_with_backoff(faults, data, tmp_path, capsys):
    transport, sleeps = faults
    transport.queue[EVALUATE] = [
        httpx.Response(
            529,
            json={"detail": {"error_type": "overloaded_error", "message": "queue full"}},
            headers={"retry-after-ms": "1500"},
        ),
        httpx.Response(500, json={"detail": {"error_type": "internal_error", "message": "boom"}}),
    ]
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 0, err
    assert "529 (overloaded_error: queue full); retrying in 1.5 s (1 of 5)" in err
    assert "500 (internal_error: boom); retrying in" in err
    assert sleeps[0] == 1.5 and 2.0 <= sleeps[1] <= 2.5  # the server's retry-after-ms, then 1 s doubled
    assert [r["id"] for r in _rows(out)] == [r["id"] for r in ROWS]


def test_a_server_failing_every_retry_stops_the_run_and_the_same_command_resumes(faults, data, tmp_path, capsys):
    transport, sleeps = faults
    busy = httpx.Response(503, json={"detail": {"error_type": "overloaded_error", "message": "draining"}})
    transport.queue[EVALUATE] = [None, busy, busy]
    out = tmp_path / "o.jsonl"
    argv = ["--evaluators", "faithfulness", "--batch-size", "3", "--retries", "1", "--server", "http://lj.test"]
    status, err = _run(capsys, data, out, *argv)
    assert status == 1, err
    assert "answered 503 (overloaded_error: draining) after 2 attempts" in err
    assert "stopped after 3 of 7 rows" in err and "the same command resumes" in err
    assert [r["id"] for r in _rows(out)] == ["r0", "r1", "r2"]  # the first call's rows are kept
    assert len(sleeps) == 1
    status, err = _run(capsys, data, out, *argv)
    assert status == 0, err
    assert "resumed 3 of 7 rows" in err
    assert [r["id"] for r in _rows(out)] == [r["id"] for r in ROWS]  # every id once


def test_a_lost_connection_is_retried_and_the_engine_checked_again(faults, data, tmp_path, capsys):
    transport, _ = faults
    transport.queue[EVALUATE] = [httpx.ReadError("connection reset by peer")]
    status, err = _run(capsys, data, tmp_path / "o.jsonl", "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 0, err
    assert "the connection failed (connection reset by peer); retrying in" in err
    paths = [p for _, p, _ in transport.calls]
    # the start (healthz, models), the lost call, its retry, then the engine asked again
    assert paths[:5] == ["/healthz", "/v1/models", EVALUATE, EVALUATE, "/healthz"]


def test_a_server_that_comes_back_with_another_engine_is_refused(faults, data, tmp_path, capsys):
    transport, _ = faults

    def other_model(body: dict[str, Any]) -> None:
        body["engine"]["model"] = "another-model"

    transport.queue["/healthz"] = [None, _rewrite(other_model)]
    transport.queue[EVALUATE] = [httpx.ConnectError("connection refused")]
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 2, err
    assert "came back with another engine (model: another-model now, scripted before)" in err
    assert _rows(out) == []  # its answer was not written


def test_no_answer_in_time_is_a_clear_error_not_retried(faults, data, tmp_path, capsys):
    transport, sleeps = faults
    transport.queue[EVALUATE] = [httpx.ReadTimeout("timed out")]
    argv = ["--evaluators", "faithfulness", "--timeout", "7", "--server", "http://lj.test"]
    status, err = _run(capsys, data, tmp_path / "o.jsonl", *argv)
    assert status == 1, err
    assert "no answer within 7 s (--timeout)" in err and "--batch-size" in err
    assert sleeps == []


def test_items_the_server_was_too_busy_for_are_sent_again(faults, data, tmp_path, capsys):
    transport, sleeps = faults

    def busy_first_item(body: dict[str, Any]) -> None:
        body["results"][0]["results"]["faithfulness"] = {
            "name": "faithfulness",
            "version": "2",
            "status": "error",
            "reason": "OverloadedError: the queue is full (256 waiting)",
        }

    transport.queue[EVALUATE] = [_rewrite(busy_first_item)]
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 0, err
    assert "overloaded for 1 of the items" in err and len(sleeps) == 1
    assert transport.posts() == [4, 1, 3]  # the busy item alone, then the next batch
    assert all(r["results"]["faithfulness"]["status"] == "ok" for r in _rows(out))


# -- refusals --------------------------------------------------------------------------------------


def test_a_422_naming_an_item_fails_that_row_only(data, tmp_path, capsys):
    rows = [*ROWS[:2], {**ROWS[2], "output": "y" * 300}, *ROWS[3:]]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "o.jsonl"
    with serve_in_thread(create_app(make_judge(), max_text_chars=200)) as url:
        status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", url)
        assert status == 0, err
        by_id = {r["id"]: r for r in _rows(out)}
        refused = by_id["r2"]["results"]["faithfulness"]
        assert refused["status"] == "error"
        assert (
            "the server refused the item (422): output: a string may have at most 200 characters" in refused["reason"]
        )
        assert all(by_id[r["id"]]["results"]["faithfulness"]["status"] == "ok" for r in rows if r["id"] != "r2")
        # an error row runs again on a resume (and fails the same way while the row is too long)
        status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", url)
        assert status == 0 and "retrying 1 rows that had errors" in err
        assert [r["id"] for r in _rows(out)].count("r2") == 1


def test_a_body_over_the_servers_limit_halves_the_batch(faults, data, tmp_path, capsys):
    transport, _ = faults
    too_large = {"detail": {"error_type": "request_too_large", "message": "the body is over 1 MiB"}}
    transport.queue[EVALUATE] = [httpx.Response(413, json=too_large)]
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 0, err
    assert transport.posts() == [4, 2, 2, 2, 1]  # the refused 4 in halves, then at most 2 per call
    assert len(_rows(out)) == len(ROWS)


def test_a_request_the_server_refuses_names_the_field_and_exits_2(server, data, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    argv = ["--evaluators", "faithfulness", "--request-model", "no-such-model", "--server", server]
    status, err = _run(capsys, data, out, *argv)
    assert status == 2, err
    assert "refused the request (400): api_usage_error: Unknown model: 'no-such-model'" in err
    assert "Traceback" not in err


def test_another_evaluator_version_on_the_server_stops_before_writing(faults, data, tmp_path, capsys):
    transport, _ = faults

    def version_9(body: dict[str, Any]) -> None:
        for item in body["results"]:
            item["results"]["faithfulness"]["version"] = "9"

    transport.queue[EVALUATE] = [_rewrite(version_9)]
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
    assert status == 2, err
    assert "the server answers faithfulness version 9, where the selection here is version 2" in err
    assert _rows(out) == []


def test_the_api_key_comes_from_the_environment_or_the_flag(data, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LOGITJUDGE_API_KEY", raising=False)
    out = tmp_path / "o.jsonl"
    argv = ["--evaluators", "faithfulness", "--limit", "1"]
    with serve_in_thread(create_app(make_judge(), api_keys=["k-1"])) as url:
        status, err = _run(capsys, data, out, *argv, "--server", url)
        assert status == 2, err
        assert "refused the API key (401" in err and "LOGITJUDGE_API_KEY" in err
        assert not out.exists()  # refused before the results file was made
        assert _run(capsys, data, out, *argv, "--server", url, "--api-key", "k-1")[0] == 0
        monkeypatch.setenv("LOGITJUDGE_API_KEY", "k-1")
        assert _run(capsys, data, out, *argv, "--server", url, "--overwrite")[0] == 0
        status, err = _run(capsys, data, out, *argv, "--server", url, "--api-key", "bad key", "--overwrite")
        assert status == 2 and "printable ASCII without spaces" in err and "bad key" not in err


# -- bad command lines and unreachable servers -------------------------------------------------------


def test_an_unreachable_server_is_a_clear_error_and_exit_1_without_a_traceback(data, tmp_path):
    out = tmp_path / "o.jsonl"
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "logitjudge.cli", "evaluate", str(data), "--out", str(out), "--evaluators", "RAG"]
        + ["--server", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"cannot reach the server at {url}: cannot connect" in proc.stderr
    assert "Is `logitjudge serve` running there?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not Path(f"{out}.run.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--server", "127.0.0.1:8000"], "expected an http(s) URL"),
        (["--server", "http://127.0.0.1:99999"], "expected http://HOST:PORT"),
        (["--server", "http://h:8000", "--model", "smollm2-135m"], "--model: with --server the server's model"),
        (["--server", "http://h:8000", "--dtype", "bfloat16"], "--dtype: with --server"),
        (["--server", "http://h:8000", "--debias", "batch"], "--debias batch"),
        (["--api-key", "k"], "--api-key: only used with --server"),
        (["--retries", "3", "--timeout", "9"], "--timeout, --retries: only used with --server"),
    ],
)
def test_bad_server_command_lines_exit_2_before_anything_runs(data, tmp_path, capsys, argv, message):
    out = tmp_path / "o.jsonl"
    status, err = _run(capsys, data, out, "--evaluators", "faithfulness", *argv)
    assert status == 2, err
    assert message in err
    assert not out.exists()


def test_normalize_url_takes_the_endpoint_url_too():
    assert normalize_url("http://h:8000/") == "http://h:8000"
    assert normalize_url(" https://h/judge/api/v1/evaluate ") == "https://h/judge"


# -- any server of the evaluator API ---------------------------------------------------------------


def test_a_server_with_only_the_evaluate_route_is_enough(data, tmp_path, capsys):
    """No /healthz, no /v1/models: the run goes through, and says that the record names no engine."""
    app = FastAPI()
    install_error_handlers(app)
    include_evaluate_routes(app, make_judge())
    out = tmp_path / "o.jsonl"
    with serve_in_thread(app) as url:
        status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", url)
    assert status == 0, err
    assert "does not describe its engine" in err
    assert len(_rows(out)) == len(ROWS)
    assert json.loads(Path(f"{out}.run.json").read_text())["engine"] == {"model": None}


def test_a_strict_wire_server_is_asked_for_the_extension_fields(data, tmp_path, capsys):
    """A server started with --strict-wire leaves the x_ fields out unless a request asks for
    them; its /healthz says so, and the client asks, so the rows are a local run's."""
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    flags = ["--evaluators", "faithfulness"]
    status, err = _run(capsys, data, local, *flags, "--judge-factory", f"{Path(__file__).stem}:make_judge")
    assert status == 0, err
    with serve_in_thread(create_app(make_judge(), strict_wire=True)) as url:
        status, err = _run(capsys, data, remote, *flags, "--server", url)
    assert status == 0, err
    assert _rows(remote) == _rows(local)
    assert "x_option_mass" in _rows(remote)[0]["results"]["faithfulness"]


def test_more_items_than_the_server_takes_per_call_halves_the_batch(data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "o.jsonl"
    with serve_in_thread(create_app(make_judge(), max_items=2)) as url:
        transport = Faults(url)
        client = functools.partial(ServerClient, transport=httpx.MockTransport(transport))
        monkeypatch.setattr(evaluate_cli, "ServerClient", client)
        status, err = _run(capsys, data, out, "--evaluators", "faithfulness", "--server", "http://lj.test")
        transport.real.close()
    assert status == 0, err
    assert transport.posts() == [4, 2, 2, 2, 1]  # refused at 4 (max_items 2), then at most 2 per call
    assert [r["id"] for r in _rows(out)] == [r["id"] for r in ROWS]


def test_rows_that_cannot_be_asked_are_the_error_rows_of_a_local_run(server, tmp_path, capsys):
    """A state that is not valid Text (a NaN in a structured chunk) and a blank chunk are refused
    here, as the local engine request refuses them: nothing is sent for those rows."""
    data, local, remote = tmp_path / "d.jsonl", tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    data.write_text(
        '{"id": "ok", "output": "a", "context": ["c"]}\n'
        '{"id": "nan", "output": "a", "context": [{"price": NaN}]}\n'
        '{"id": "blank", "output": "a", "context": ["c", " "]}\n',
        encoding="utf-8",
    )
    flags = ["--evaluators", "faithfulness"]
    status, err = _run(capsys, data, local, *flags, "--judge-factory", f"{Path(__file__).stem}:make_judge")
    assert status == 0, err
    status, err = _run(capsys, data, remote, *flags, "--server", server)
    assert status == 0, err
    assert _rows(remote) == _rows(local)
    by_id = {r["id"]: r["results"]["faithfulness"] for r in _rows(remote)}
    assert by_id["ok"]["status"] == "ok"
    assert by_id["nan"]["status"] == "error" and by_id["nan"]["reason"].startswith("InvalidRequestError")
    assert by_id["blank"]["status"] == "error" and "context[1] is blank" in by_id["blank"]["reason"]
