"""``logitjudge serve --backend vllm`` as a user starts it: the server guide's curl and SDK examples,
the 413 budget, concurrent requests handed to vLLM at once, and jevcompat (every MUST and every
SHOULD it tests without a key; auth is the middleware's, the same on both backends).

One server process for the module, with its own vLLM engine (~1 min to start on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.jevcompat import run_jevcompat

from logitjudge.engine.config import VLLM_CONCURRENT_BATCHES

KV_CACHE_GIB = 1  # GiB, as the session engine (conftest)

SERVER_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "server.md"
LOGITJUDGE = Path(sys.executable).with_name("logitjudge")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    cmd = [str(LOGITJUDGE), "serve", "--backend", "vllm", "--port", str(port), "--kv-cache-gib", str(KV_CACHE_GIB)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("LOGITJUDGE_API_KEYS", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(2)
            assert proc.poll() is None, log.read_text()[-5000:]
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _guide_block(start: str) -> str:
    """The server guide's fenced block that begins with ``start`` (the README links to it)."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", SERVER_GUIDE.read_text(encoding="utf-8"), flags=re.S)
    return next(b for b in blocks if b.startswith(start))


def test_healthz_names_the_backend_and_its_concurrency(served: str) -> None:
    health = httpx.get(f"{served}/healthz").json()
    assert health["engine"]["backend"] == "vllm" and health["engine"]["strategy"] == "vllm"
    assert health["batching"]["max_concurrent_batches"] == VLLM_CONCURRENT_BATCHES


def test_the_guide_curl_example(served: str) -> None:
    command = _guide_block("curl ").replace("http://127.0.0.1:8000", served)
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, check=True).stdout
    data = json.loads(out)
    assert set(data["answers"]) == {"refund", "team", "anger"}
    assert data["answers"]["team"]["choice"] in ("Billing", "Shipping")


def test_the_guide_sdk_example(served: str) -> None:
    code = _guide_block("from typesafe_sdk import").replace("http://127.0.0.1:8000", served)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    noul, choice, score = shlex.split(out.stdout)
    assert 0 <= float(noul) <= 1 and choice in ("Billing", "Shipping") and 0 <= float(score) <= 2


def test_over_the_budget_is_413_naming_the_part(served: str) -> None:
    body = {
        "model": "jev-latest",
        "state": "The parcel arrived broken. " * 3000,
        "questions": {"q": {"type": "noul", "instructions": "Broken?"}},
    }
    r = httpx.post(f"{served}/v1/systemone", json=body, timeout=300)
    assert r.status_code == 413, r.text
    detail = r.json()["detail"]
    assert detail["error_type"] == "request_too_large" and "state + longest question" in detail["message"]


def test_concurrent_requests_are_in_vllm_at_once(served: str) -> None:
    bodies = [
        {
            "model": "jev-latest",
            "state": f"Ticket {i}: the parcel arrived broken and I want my money back.",
            "questions": {"refund": {"type": "noul", "instructions": "Does the customer want a refund?"}},
        }
        for i in range(8)
    ]
    in_flight: list[int] = []

    def poll() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(in_flight) < 400:
            in_flight.append(httpx.get(f"{served}/healthz", timeout=30).json()["queue"]["in_flight"])
            if max(in_flight) > 1:
                return
            time.sleep(0.01)

    with ThreadPoolExecutor(9) as pool:
        watcher = pool.submit(poll)
        responses = list(pool.map(lambda b: httpx.post(f"{served}/v1/systemone", json=b, timeout=300), bodies))
        watcher.result()
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    assert max(in_flight) > 1  # more than one request in the engine at a time


def test_jevcompat_conformant_against_serve_backend_vllm(served: str, tmp_path: Path) -> None:
    summary = run_jevcompat(served, tmp_path / "jevcompat-vllm.json")
    assert summary["SHOULD"]["passed"] == 13  # auth.missing and auth.invalid need --key


def test_a_question_naming_an_adapter_is_refused_naming_it(served: str) -> None:
    """vLLM has no activated LoRA: a question with ``x_adapter`` is a 422 naming its field (it is
    not answered without the adapter)."""
    body = {
        "model": "jev-latest",
        "state": "The parcel arrived broken.",
        "questions": {"q": {"type": "noul", "instructions": "Broken?", "x_adapter": "faithfulness"}},
    }
    r = httpx.post(f"{served}/v1/systemone", json=body, timeout=300)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "questions", "q", "adapter"]
    assert "vllm" in r.json()["detail"][0]["msg"]
