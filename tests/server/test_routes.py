"""Routes, response shapes and metrics over the scripted engine (fixed probabilities).

Engine correctness over HTTP (the default model) is in ``test_real_engine.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.server.app import create_app


def test_systemone_answers_every_question_in_the_wire_shape(client: TestClient, body: dict[str, Any]) -> None:
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-typesafe-request-id"].startswith("req_")
    data = r.json()
    assert data["model"] == "scripted-1"
    assert list(data["answers"]) == ["refund", "team", "anger"]
    assert data["answers"]["refund"] == {"type": "noul", "noul": 1 / 3, "x_option_mass": 1.0}
    team = data["answers"]["team"]
    assert team["choice"] == "Shipping" and team["probabilities"] == {"Billing": 1 / 3, "Shipping": 2 / 3}
    assert abs(team["confidence"] - (2 / 3 - 1 / 2) / (1 / 2)) < 1e-12
    anger = data["answers"]["anger"]
    assert anger["legend"] == {"0": "Calm", "1": "Annoyed", "2": "Furious"}
    assert set(anger["probabilities"]) == {"0", "1", "2"}
    assert abs(anger["score"] - sum(int(k) * p for k, p in anger["probabilities"].items())) < 1e-12
    assert "confidence" in anger and "confidence" not in data["answers"]["refund"]
    usage = data["usage"]
    assert isinstance(usage["input_tokens"], int) and isinstance(usage["output_tokens"], int)


def test_unicode_ids_and_option_names_come_back_byte_for_byte(client: TestClient, body: dict[str, Any]) -> None:
    names = ["환불 요청", "배송 문의", "🙂 기타", "e\u0301", "\u00e9"]  # NFD and NFC kept apart
    body["questions"] = {
        "질문": {"type": "choice", "criteria": {n: None for n in names}},
        "🎯": {"type": "noul"},
        "with space": {"type": "noul", "criteria": {"true": "yes"}},
        "q.2": {"type": "noul", "criteria": {"false": ["no", {"really": True}]}},
        "-": {"type": "score", "criteria": [{"label": "Calm"}, ["a", "b"], "Angry"]},
    }
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8")
    r = client.post("/v1/systemone", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    data = json.loads(r.content.decode("utf-8"))
    assert list(data["answers"]) == ["질문", "🎯", "with space", "q.2", "-"]
    assert list(data["answers"]["질문"]["probabilities"]) == names
    assert data["answers"]["-"]["legend"] == {"0": {"label": "Calm"}, "1": ["a", "b"], "2": "Angry"}
    for needle in names:
        assert needle.encode("utf-8") in r.content


def test_state_may_be_a_string_an_object_or_an_array(client: TestClient, body: dict[str, Any]) -> None:
    for state in ("text", {"ticket": {"id": 7, "tags": ["a"]}, "x": None}, [1, "two", {"three": 3.5}]):
        assert client.post("/v1/systemone", json={**body, "state": state}).status_code == 200


def test_unknown_fields_are_ignored_and_the_served_name_is_accepted(client: TestClient, body: dict[str, Any]) -> None:
    extra = {**body, "x_trace_id": "t", "seed": 7, "x_nonce": "n", "metadata": {"a": 1}}
    extra["questions"]["refund"]["weight"] = 3
    assert client.post("/v1/systemone", json=extra).status_code == 200
    assert client.post("/v1/systemone", json={**body, "model": "scripted-1"}).status_code == 200


def test_choice_accepts_2_to_255_options_and_score_2_to_10_levels(client: TestClient, body: dict[str, Any]) -> None:
    for n in (2, 26, 255):
        crit = {"Billing": "bills", **{f"Queue {i:03d}": f"queue {i}" for i in range(1, n)}}
        r = client.post("/v1/systemone", json={**body, "questions": {"q": {"type": "choice", "criteria": crit}}})
        assert r.status_code == 200 and len(r.json()["answers"]["q"]["probabilities"]) == n
    for n in (2, 10):
        qs = {"q": {"type": "score", "criteria": [f"L{i}" for i in range(n)]}}
        r = client.post("/v1/systemone", json={**body, "questions": qs})
        assert r.status_code == 200 and len(r.json()["answers"]["q"]["legend"]) == n


def test_models_lists_jev_latest_first_then_the_served_model(client: TestClient) -> None:
    r = client.get("/v1/models")
    assert r.status_code == 200
    models = r.json()["models"]
    assert [m["name"] for m in models] == ["jev-latest", "scripted-1"]
    for m in models:
        assert set(m) == {"name", "description", "release_date"}
        assert all(isinstance(v, str) for v in m.values())
        assert len(m["release_date"]) == 10 and m["release_date"][4] == "-"


def test_healthz_reports_model_engine_and_queue(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    data = r.json()
    assert data["status"] == "ok" and data["model"] == "scripted-1"
    assert data["queue"] == {"waiting": 0, "in_flight": 0, "max_queue": 256}
    assert data["engine"]["strategy"] == "scripted"
    assert data["batching"] == {"max_num_batched_tokens": 16_384, "max_batch_requests": 64, "max_concurrent_batches": 1}


def test_docs_and_openapi_are_served(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert "/v1/systemone" in spec["paths"] and "/v1/models" in spec["paths"]


def _metric(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric line starting {line_start!r}")


def test_metrics_count_requests_questions_tokens_and_batches(client: TestClient, body: dict[str, Any]) -> None:
    client.post("/v1/systemone", json=body)
    client.post("/v1/systemone", json={**body, "model": "nope"})
    client.get("/no/such/route")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    ok = 'logitjudge_http_requests_total{method="POST",route="/v1/systemone",status="200"}'
    assert _metric(text, ok) == 1
    assert _metric(text, 'logitjudge_http_requests_total{method="POST",route="/v1/systemone",status="400"}') == 1
    assert _metric(text, 'logitjudge_http_requests_total{method="GET",route="unmatched",status="404"}') == 1
    for t in ("noul", "choice", "score"):
        assert _metric(text, f'logitjudge_questions_total{{type="{t}"}}') == 1
    assert _metric(text, "logitjudge_input_tokens_total") > 0
    assert _metric(text, "logitjudge_batch_size_count") == 1
    assert _metric(text, "logitjudge_queue_depth") == 0
    assert _metric(text, 'logitjudge_http_request_duration_seconds_count{route="/v1/systemone"}') == 2


def test_each_app_has_its_own_registry(scripted_judge: Judge, body: dict[str, Any]) -> None:
    with TestClient(create_app(scripted_judge)) as a, TestClient(create_app(scripted_judge)) as b:
        a.post("/v1/systemone", json=body)
        assert _metric(a.get("/metrics").text, "logitjudge_batch_size_count") == 1
        text_b = b.get("/metrics").text
        assert "logitjudge_questions_total{" not in text_b
        assert _metric(text_b, "logitjudge_batch_size_count") == 0


def test_evaluate_routes_are_mounted_when_present(client: TestClient) -> None:
    import importlib.util

    if importlib.util.find_spec("logitjudge.server.evaluate_routes") is None:
        assert client.post("/api/v1/evaluate", json={}).status_code == 404
    else:
        assert "/api/v1/evaluate" in client.get("/openapi.json").json()["paths"]


def test_server_imports_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from logitjudge import Judge; from logitjudge.server.app import create_app;"
        "from support.scripted import ScriptedEngine; create_app(Judge(ScriptedEngine()));"
        "print('torch' in sys.modules)"
    )
    tests_dir = str(Path(__file__).resolve().parents[1])  # for support.scripted
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), tests_dir) if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_answers_come_from_one_engine_call_per_request(body: dict[str, Any]) -> None:
    engine = ScriptedEngine()
    with TestClient(create_app(Judge(engine))) as c:
        assert c.post("/v1/systemone", json=body).status_code == 200
    assert len(engine.calls) == 1 and len(engine.calls[0][0].questions) == 3
