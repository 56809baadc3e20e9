"""The app under a real uvicorn on loopback: disconnects, drain, and real sockets.

The engine is the scripted one behind a gate, so the test decides when batches finish.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
from server_helpers import BODY, GatedEngine
from support.background import serve_in_thread

from logitjudge import Judge
from logitjudge.server.app import create_app


def _raw_post(base_url: str, body: dict) -> socket.socket:
    """Send a POST on a raw socket and return it without reading the answer."""
    url = urlparse(base_url)
    raw = json.dumps(body).encode()
    sock = socket.create_connection((url.hostname, url.port))
    head = (
        f"POST /v1/systemone HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\n\r\n"
    ).encode()
    sock.sendall(head + raw)
    return sock


def _wait(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_a_client_that_disconnects_frees_its_queue_place() -> None:
    engine = GatedEngine()
    app = create_app(Judge(engine), max_queue=1)
    scheduler = app.state.scheduler
    with serve_in_thread(app) as url:
        running = _raw_post(url, {**BODY, "state": "running"})
        _wait(engine.entered.is_set, "the first batch started")
        gone = _raw_post(url, {**BODY, "state": "gone"})
        _wait(lambda: scheduler.waiting == 1, "the second request queued")
        assert httpx.post(f"{url}/v1/systemone", json=BODY, timeout=30).status_code == 529  # overloaded
        gone.close()  # the client goes away while waiting
        _wait(lambda: scheduler.waiting == 0, "the place was freed")
        result: dict[str, int] = {}
        later = threading.Thread(
            target=lambda: result.update(
                status=httpx.post(f"{url}/v1/systemone", json={**BODY, "state": "later"}, timeout=60).status_code
            )
        )
        later.start()
        _wait(lambda: scheduler.waiting == 1, "the later request queued")
        engine.gate.set()
        later.join(timeout=60)
        assert result["status"] == 200
        reply = running.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200")
        running.close()
        metrics = httpx.get(f"{url}/metrics").text
    states = [r.state for call in engine.calls for r in call]
    assert states == ["running", "later"]  # "gone" never reached the engine
    assert "logitjudge_queue_depth 0.0" in metrics


def test_shutdown_drains_requests_in_flight() -> None:
    engine = GatedEngine()
    app = create_app(Judge(engine))
    results: list[int] = []
    with serve_in_thread(app) as url:
        clients = [
            threading.Thread(
                target=lambda: results.append(httpx.post(f"{url}/v1/systemone", json=BODY, timeout=60).status_code)
            )
            for _ in range(3)
        ]
        for t in clients:
            t.start()
        _wait(engine.entered.is_set, "a batch started")
        _wait(lambda: app.state.scheduler.waiting + app.state.scheduler.in_flight == 3, "all 3 accepted")
        address = (urlparse(url).hostname, urlparse(url).port)

        def open_gate_once_stopping() -> None:
            # Shutdown begins by closing the listening socket: from then on connecting fails.
            while True:
                try:
                    socket.create_connection(address, timeout=1).close()
                except OSError:
                    break
                time.sleep(0.01)
            engine.gate.set()

        threading.Thread(target=open_gate_once_stopping, daemon=True).start()
    # leaving the block stopped the server; every accepted request was still answered
    for t in clients:
        t.join(timeout=60)
    assert results == [200, 200, 200]
    assert app.state.scheduler.closing
