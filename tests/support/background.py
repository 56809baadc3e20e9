"""Run an app with uvicorn in a background thread on loopback (tests, benchmarks, notebooks).

::

    with serve_in_thread(create_app(judge)) as base_url:     # e.g. "http://127.0.0.1:54321"
        httpx.post(f"{base_url}/v1/systemone", json=body)

Leaving the block shuts the server down the way ``Ctrl-C`` does: stop accepting, finish open
requests, then run the app's shutdown (the scheduler's drain).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

__all__ = ["serve_in_thread"]


@contextlib.contextmanager
def serve_in_thread(app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0) -> Iterator[str]:
    """Serve ``app`` on ``host:port`` (0 = a free port) in a daemon thread; yields the base URL.

    Raises:
        RuntimeError: the server did not start within ``start_timeout`` seconds.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="logitjudge-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
