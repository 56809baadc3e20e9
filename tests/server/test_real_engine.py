"""The server over the default model (SmolLM2-135M-Instruct, fp32, CPU): routes, errors, auth,
batching equivalence, the official SDK as a drop-in, and the jevcompat conformance suite.

The model loads once per session (``default_judge`` in ``tests/conftest.py``); each test module
serves it with uvicorn on a free loopback port.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import BODY
from support.background import serve_in_thread
from support.jevcompat import run_jevcompat as _jevcompat

from logitjudge.engine.types import EngineRequest, EngineResult
from logitjudge.errors import LogitJudgeError
from logitjudge.judge import Judge
from logitjudge.server.app import create_app

KEY = "lj-test-key-3f9a"


@pytest.fixture(scope="module")
def served(default_judge) -> Any:
    with serve_in_thread(create_app(default_judge)) as url:
        yield url


@pytest.fixture(scope="module")
def served_with_key(default_judge) -> Any:
    with serve_in_thread(create_app(default_judge, api_keys=[KEY])) as url:
        yield url


def post(url: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/systemone", json=body, timeout=300, **kw)


def test_every_route_on_the_default_model(served: str, default_judge) -> None:
    r = post(served, BODY)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] == default_judge.model_name
    assert list(data["answers"]) == ["refund", "team", "anger"]
    assert 0 <= data["answers"]["refund"]["noul"] <= 1
    assert abs(sum(data["answers"]["team"]["probabilities"].values()) - 1) < 1e-6
    assert data["usage"]["input_tokens"] > 0 and isinstance(data["usage"]["input_tokens"], int)
    by_name = post(served, {**BODY, "model": default_judge.model_name})
    assert by_name.json()["answers"] == data["answers"]  # deterministic, and the alias is the same model

    models = httpx.get(f"{served}/v1/models").json()["models"]
    assert [m["name"] for m in models] == ["jev-latest", default_judge.model_name]
    health = httpx.get(f"{served}/healthz").json()
    assert health["status"] == "ok" and health["engine"]["device"] and health["engine"]["strategy"]
    metrics = httpx.get(f"{served}/metrics").text
    assert 'logitjudge_questions_total{type="choice"}' in metrics
    assert httpx.get(f"{served}/docs").status_code == 200


def test_errors_on_the_default_model(served: str) -> None:
    unknown = post(served, {**BODY, "model": "jev-9"})
    assert unknown.status_code == 400 and unknown.json()["detail"]["error_type"] == "api_usage_error"
    invalid = post(served, {**BODY, "questions": {}})
    assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == ["body", "questions"]
    empty = post(served, {**BODY, "state": "   "})  # the engine refuses an empty state
    assert empty.status_code == 422 and empty.json()["detail"][0]["loc"][:2] == ["body", "state"]
    # Over the budget: refused with 413 naming the part, never truncated.
    long = post(served, {**BODY, "state": "The parcel arrived broken. " * 3000})
    assert long.status_code == 413, long.text
    detail = long.json()["detail"]
    assert detail["error_type"] == "request_too_large" and "limit" in detail["message"]
    missing = httpx.get(f"{served}/v1/nothing")
    assert missing.status_code == 404 and missing.json()["detail"]["error_type"] == "not_found"


def test_auth_on_the_default_model(served_with_key: str, served: str) -> None:
    assert post(served_with_key, BODY).status_code == 401
    assert post(served_with_key, BODY, headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = post(served_with_key, BODY, headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200
    assert post(served, BODY, headers={"Authorization": "Bearer anything"}).json() == ok.json()


class HeldJudge(Judge):
    """The real judge, whose engine calls wait while ``release`` is clear (to queue requests behind one)."""

    def __init__(self, judge: Judge) -> None:
        super().__init__(judge.engine)
        self.default_rotations, self.systemone_rotations = judge.default_rotations, judge.systemone_rotations
        self.release = threading.Event()
        self.entered = threading.Event()
        self.sizes: list[int] = []

    def answer_many(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        self.entered.set()
        assert self.release.wait(timeout=300)
        self.sizes.append(len(requests))
        return super().answer_many(requests)


def _wait(predicate, what: str, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def _max_diff(a: dict, b: dict) -> float:
    diffs = []
    for qid, x in a["answers"].items():
        y = b["answers"][qid]
        if x["type"] == "noul":
            diffs.append(abs(x["noul"] - y["noul"]))
        else:
            diffs += [abs(p - y["probabilities"][k]) for k, p in x["probabilities"].items()]
    return max(diffs)


def test_a_request_answered_in_a_batch_equals_it_answered_alone(default_judge) -> None:
    held = HeldJudge(default_judge)
    app = create_app(held, max_num_batched_tokens=1_000_000, max_batch_requests=64)
    others = [
        {**BODY, "state": "Hi, I love the product, thanks!"},
        {
            "model": "jev-latest",
            "state": {"ticket": 12, "text": "Where is my order?"},
            "questions": {"lang": {"type": "choice", "criteria": {"English": None, "Other": None, "French": "fr"}}},
        },
        {**BODY, "state": "My invoice shows a double charge. " * 20},
    ]
    with serve_in_thread(app) as url:
        held.release.set()
        alone = post(url, BODY).json()
        held.release.clear()
        held.entered.clear()
        replies: dict[int, httpx.Response] = {}

        def send(i: int, body: dict) -> None:
            replies[i] = post(url, body)

        blocker = threading.Thread(target=send, args=(-1, others[0]))
        blocker.start()
        _wait(held.entered.is_set, "the blocker is running")
        senders = [threading.Thread(target=send, args=(i, b)) for i, b in enumerate([BODY, *others])]
        for t in senders:
            t.start()
        _wait(lambda: app.state.scheduler.waiting == 4, "4 requests queued behind the blocker")
        held.release.set()
        for t in [blocker, *senders]:
            t.join(timeout=300)
    assert held.sizes == [1, 1, 4]  # alone, the blocker, then the four in one engine call
    assert all(r.status_code == 200 for r in replies.values())
    batched = replies[0].json()
    assert _max_diff(alone, batched) <= 1e-4
    assert batched["usage"] == alone["usage"]


def test_the_official_sdk_is_a_drop_in(served: str, served_with_key: str) -> None:
    from typesafe_sdk import Choice, Noul, Score, TypeSafeClient
    from typesafe_sdk._core.compression import COMPRESSORS

    questions = {
        "refund": Noul(instructions="Does the customer want a refund?"),
        "team": Choice(criteria={"Billing": None, "Shipping": "parcels", "환불 요청": "refunds"}),
        "anger": Score(instructions="How angry is the customer?", criteria=["Calm", "Annoyed", "Furious"]),
    }
    for url, key in ((served, "any-key-is-ignored"), (served_with_key, KEY)):
        with TypeSafeClient(api_key=key, base_url=url, timeout=300) as client:
            r = client.system_one(state="The parcel arrived broken.", questions=questions)
        assert 0 <= r.nouls["refund"].noul <= 1
        assert r.choices["team"].choice in {"Billing", "Shipping", "환불 요청"}
        assert 0 <= r.scores["anger"].score <= 2
    # Newer SDKs compress bodies of 1 KiB and more with zstd (spec A.2 T10).
    assert "zstd" in COMPRESSORS, "install typesafe-sdk[zstd] so the SDK sends zstd bodies"
    with TypeSafeClient(api_key="k", base_url=served, timeout=300, compression="zstd") as client:
        r = client.system_one(state="The parcel arrived broken. " * 80, questions=questions)
    assert set(r.choices) == {"team"} and set(r.scores) == {"anger"}


def test_jevcompat_conformant_with_every_should(served: str, tmp_path: Path) -> None:
    summary = _jevcompat(served, tmp_path / "jevcompat.json")
    assert summary["SHOULD"]["passed"] == 13  # auth.missing and auth.invalid need --key


def test_jevcompat_conformant_with_every_should_with_an_api_key(served_with_key: str, tmp_path: Path) -> None:
    summary = _jevcompat(served_with_key, tmp_path / "jevcompat-key.json", key=KEY)
    assert summary["SHOULD"]["passed"] == 15


def test_serve_cli_takes_keys_from_flags_and_environment_and_stops_cleanly(tmp_path: Path) -> None:
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LOGITJUDGE_API_KEYS": "env-key-1, env-key-2"}
    cmd = [sys.executable, "-m", "logitjudge.cli", "serve", "--port", str(port), "--api-key", "flag-key"]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: _healthy(url) or proc.poll() is not None, "the server is up", limit=600)
            assert proc.poll() is None, log.read_text()
            assert httpx.get(f"{url}/v1/models").status_code == 401
            for key in ("flag-key", "env-key-1", "env-key-2"):
                r = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200, key
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=120)
    assert code == 0
    text = log.read_text()
    assert all(k not in text for k in ("flag-key", "env-key-1", "env-key-2"))  # keys are never logged
    assert "3 key(s)" in text


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_batching_defaults_follow_the_device(default_judge) -> None:
    from logitjudge.server.app import ACCELERATOR_BATCHING, CPU_BATCHING, default_batching

    on_cpu = str(default_judge.describe()["device"]).startswith("cpu")
    assert default_batching(default_judge) == (CPU_BATCHING if on_cpu else ACCELERATOR_BATCHING)


def test_metrics_show_the_state_cache_and_the_path_auto_chose(served: str, default_judge) -> None:
    """A repeated state is a state-cache hit on the real model, visible in /metrics, and it
    answers what the first request answered."""

    def scrape() -> dict[str, float]:
        text = httpx.get(f"{served}/metrics").text
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("logitjudge_state_cache", "logitjudge_forward_paths"))
        }

    body = {**BODY, "state": BODY["state"] + " (metrics test)"}
    before = scrape()
    first = post(served, body)
    second = post(served, body)
    assert first.status_code == second.status_code == 200
    after = scrape()
    assert after["logitjudge_state_cache_hits_total"] >= before.get("logitjudge_state_cache_hits_total", 0) + 1
    assert after["logitjudge_state_cache_bytes"] > 0
    assert after['logitjudge_forward_paths_total{path="prefix_packed:cached"}'] >= 1
    again = second.json()["answers"]
    assert again["refund"]["noul"] == pytest.approx(first.json()["answers"]["refund"]["noul"], abs=1e-4)
    for name in ("team", "anger"):
        assert again[name]["probabilities"] == pytest.approx(first.json()["answers"][name]["probabilities"], abs=1e-4)
