"""SIGTERM with requests in flight, keys from a file, and logs that never hold keys or state text.

``logitjudge serve`` runs as a real subprocess on the default model; the in-process test covers
every response path of both routes with logging at DEBUG.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.server.app import create_app

MARKER = "state-text-7f3a9c-must-not-be-logged"
KEY = "file-key-5b1e0d"


def _wait(predicate: Any, what: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def _health(url: str) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"{url}/healthz", timeout=5)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def test_sigterm_drains_requests_in_flight_then_exits_0(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    keys = tmp_path / "keys"
    keys.write_text(f"# operator keys\n{KEY}\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("LOGITJUDGE_API_KEYS", None)
    env.pop("LOGITJUDGE_API_KEYS_FILE", None)
    cmd = [
        sys.executable,
        "-m",
        "logitjudge.cli",
        "serve",
        "--port",
        str(port),
        "--api-keys-file",
        str(keys),
        "--max-batch-requests",
        "1",  # one request per engine call: the rest wait in the queue
    ]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    statuses: list[int] = []
    body = {**BODY, "state": f"{MARKER}: the parcel arrived broken and I want my money back."}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: _health(url) is not None or proc.poll() is not None, "the server is up", 600)
            assert proc.poll() is None, log.read_text()
            assert httpx.post(f"{url}/v1/systemone", json=BODY).status_code == 401  # keys from the file

            def client() -> None:
                r = httpx.post(
                    f"{url}/v1/systemone", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300
                )
                statuses.append(r.status_code)

            threads = [threading.Thread(target=client) for _ in range(4)]
            for t in threads:
                t.start()

            def accepted() -> bool:
                h = _health(url)
                return h is not None and h["queue"]["waiting"] + h["queue"]["in_flight"] == 4

            _wait(accepted, "4 requests accepted", 120)
            proc.send_signal(signal.SIGTERM)
            for t in threads:
                t.join(timeout=300)
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert statuses == [200, 200, 200, 200], text[-3000:]
    assert code == 0, text[-3000:]
    assert "1 key(s)" in text and KEY not in text
    assert MARKER not in text  # request logs hold no state content


class CrashingEngine(ScriptedEngine):
    def run_batch(self, requests):  # type: ignore[override]
        if any("CRASH" in str(r.state) for r in requests):
            raise RuntimeError("engine bug")
        return super().run_batch(requests)


def test_no_response_path_logs_state_text(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    app = create_app(Judge(CrashingEngine()), max_text_chars=1000)
    item = {"input": f"{MARKER} input", "output": f"{MARKER} output", "context": [f"{MARKER} chunk"]}
    with TestClient(app, raise_server_exceptions=False) as c:
        sent = [
            c.post("/v1/systemone", json={**BODY, "state": MARKER, "x_unknown": MARKER}),  # 200, ignored field
            c.post("/v1/systemone", json={**BODY, "state": f"CRASH {MARKER}"}),  # 500 from the engine
            c.post("/v1/systemone", json={**BODY, "state": MARKER, "model": MARKER}),  # 400 unknown model
            c.post("/v1/systemone", json={**BODY, "state": MARKER * 100}),  # 422 over max_text_chars
            c.post("/v1/systemone", json={**BODY, "state": 5, "questions": {MARKER: {"type": "x"}}}),  # 422
            c.post("/api/v1/evaluate", json={"evaluators": ["chunk_relevance"], **item}),  # 200
            c.post("/api/v1/evaluate", json={"evaluators": [MARKER], **item}),  # 422 unknown evaluator
        ]
    assert [r.status_code for r in sent] == [200, 500, 400, 422, 422, 200, 422]
    assert caplog.records, "nothing was logged at all: the check would be empty"
    assert MARKER not in caplog.text


def test_a_drain_that_times_out_exits_without_waiting_for_the_engine(tmp_path: Path) -> None:
    """SIGTERM while an engine call runs past ``--drain-timeout``: the server says so and exits
    (status 1) instead of waiting for the forward to finish (minutes on a CPU)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = Path(__file__).resolve().parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent / "rubrics"), str(here.parent), env.get("PYTHONPATH", "")])
    env.pop("LOGITJUDGE_API_KEYS", None)
    env.pop("LOGITJUDGE_API_KEYS_FILE", None)
    cmd = [sys.executable, "-m", "logitjudge.cli", "serve", "--port", str(port), "--drain-timeout", "1"]
    cmd += ["--judge-factory", "lj_factories:make_stuck_judge"]
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: _health(url) is not None or proc.poll() is not None, "the server is up", 300)
            assert proc.poll() is None, log.read_text()

            def client() -> None:
                try:
                    httpx.post(f"{url}/v1/systemone", json=BODY, timeout=240)
                except httpx.HTTPError:
                    pass  # the server goes away under it

            threading.Thread(target=client, daemon=True).start()
            _wait(lambda: (_health(url) or {}).get("queue", {}).get("in_flight") == 1, "the call is running", 60)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)  # the engine call sleeps 300 s: waiting for it would time out here
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "1 engine call(s) still running; exiting without waiting for them" in text, text[-3000:]
