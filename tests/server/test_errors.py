"""Every error path of spec A.5.3 / A.9: the right status, the right body, never a 5xx for bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
import zstandard
from fastapi.testclient import TestClient
from server_helpers import BODY, GatedEngine
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.engine.types import EngineRequest, EngineResult
from logitjudge.errors import ContextOverflowError, InvalidRequestError, LogitJudgeError
from logitjudge.server.app import create_app

JSON = {"content-type": "application/json"}


def assert_validation_shape(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail
    for d in detail:
        assert d["loc"][0] == "body" and isinstance(d["msg"], str) and isinstance(d["type"], str)
        assert "input" not in d
    return detail


def assert_error_shape(r: httpx.Response, status: int, error_type: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"]
    assert set(detail) == {"error_type", "message"} and detail["error_type"] == error_type
    assert isinstance(detail["message"], str) and detail["message"]
    return detail["message"]


def base(**questions: Any) -> dict[str, Any]:
    return {"model": "jev-latest", "state": "x", "questions": questions or {"q": {"type": "noul"}}}


# (label, body, expected loc, expected type) — the reference mock's table (spec A.5.3)
INVALID: list[tuple[str, Any, list[Any], str]] = [
    ("not an object", [1, 2], ["body"], "model_attributes_type"),
    (
        "missing state",
        {"model": "jev-latest", "questions": {"q": {"type": "noul"}}},
        ["body", "state"],
        "missing",
    ),
    ("missing model", {"state": "x", "questions": {"q": {"type": "noul"}}}, ["body", "model"], "missing"),
    ("missing questions", {"model": "jev-latest", "state": "x"}, ["body", "questions"], "missing"),
    ("empty questions", {**base(), "questions": {}}, ["body", "questions"], "too_short"),
    ("missing type", base(q={"instructions": "?"}), ["body", "questions", "q"], "union_tag_not_found"),
    ("unknown type", base(q={"type": "boolean"}), ["body", "questions", "q"], "union_tag_invalid"),
    (
        "box type",
        base(q={"type": "box", "instructions": "cat"}),
        ["body", "questions", "q"],
        "union_tag_invalid",
    ),
    (
        "choice without criteria",
        base(q={"type": "choice"}),
        ["body", "questions", "q", "choice", "criteria"],
        "missing",
    ),
    (
        "choice {}",
        base(q={"type": "choice", "criteria": {}}),
        ["body", "questions", "q", "choice", "criteria"],
        "too_short",
    ),
    (
        "choice 256",
        base(q={"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}),
        ["body", "questions", "q", "choice", "criteria"],
        "too_long",
    ),
    (
        "score as a map",
        base(q={"type": "score", "criteria": {"0": "a", "1": "b"}}),
        ["body", "questions", "q", "score", "criteria"],
        "list_type",
    ),
    (
        "score 11",
        base(q={"type": "score", "criteria": [str(i) for i in range(11)]}),
        ["body", "questions", "q", "score", "criteria"],
        "too_long",
    ),
    (
        "noul bad key",
        base(q={"type": "noul", "criteria": {"maybe": "x"}}),
        ["body", "questions", "q", "noul", "criteria", "maybe"],
        "extra_forbidden",
    ),
    ("state null", {**base(), "state": None}, ["body", "state", "str"], "string_type"),
    ("state number", {**base(), "state": 3}, ["body", "state", "str"], "string_type"),
    ("model null", {**base(), "model": None}, ["body", "model"], "string_type"),
    ("model number", {**base(), "model": 1}, ["body", "model"], "string_type"),
    ("questions list", {**base(), "questions": [{"type": "noul"}]}, ["body", "questions"], "dict_type"),
    ("question null", base(q=None), ["body", "questions", "q"], "model_attributes_type"),
    ("empty id", base(**{"": {"type": "noul"}}), ["body", "questions", "", "[key]"], "string_too_short"),
    (
        "instructions number",
        base(q={"type": "noul", "instructions": 5}),
        ["body", "questions", "q", "noul", "instructions", "str"],
        "string_type",
    ),
    (
        "criteria null (choice)",
        base(q={"type": "choice", "criteria": None}),
        ["body", "questions", "q", "choice", "criteria"],
        "dict_type",
    ),
    (
        "score null level",
        base(q={"type": "score", "criteria": ["a", None]}),
        ["body", "questions", "q", "score", "criteria", 1, "str"],
        "string_type",
    ),
    ("x_rotations string", {**base(), "x_rotations": "lots"}, ["body", "x_rotations"], "int_parsing"),
]


@pytest.mark.parametrize("label,payload,loc,kind", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_bodies_get_422_with_detail_list(
    client: TestClient, label: str, payload: Any, loc: list, kind: str
) -> None:
    detail = assert_validation_shape(client.post("/v1/systemone", json=payload))
    assert detail[0]["loc"] == loc and detail[0]["type"] == kind, detail


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "jev-latest", "state": "x", "questions": {',
        b"",
        b"not json at all",
        b'{"model": "jev-latest", "state": "x", "questions": {"q": {"type": "noul"}}} trailing',
        b"\xff\xfe\x00garbage",
    ],
)
def test_malformed_json_gets_422(client: TestClient, raw: bytes) -> None:
    detail = assert_validation_shape(client.post("/v1/systemone", content=raw, headers=JSON))
    assert detail[0]["type"] in ("json_invalid", "missing")


@pytest.mark.parametrize(
    "raw,loc",
    [
        (b'{"model":"jev-latest","state":{"a":NaN},"questions":{"q":{"type":"noul"}}}', ["body", "state"]),
        (b'{"model":"jev-latest","state":[Infinity],"questions":{"q":{"type":"noul"}}}', ["body", "state"]),
        (
            b'{"model":"jev-latest","state":"x","questions":{"q":{"type":"score","criteria":["a",{"w":-Infinity}]}}}',
            ["body", "questions", "q", "score", "criteria", 1],
        ),
        (b'{"model":"jev-latest","state":"x\\ud800","questions":{"q":{"type":"noul"}}}', ["body", "state"]),
        (
            b'{"model":"jev-latest","state":"x","questions":{"q":{"type":"choice","criteria":{"a\\udfff":null,"b":null}}}}',
            ["body", "questions", "q", "choice", "criteria"],
        ),
        (
            b'{"model":"jev-latest","state":"x","questions":{"q\\ud800":{"type":"noul"}}}',
            ["body", "questions"],
        ),
    ],
    ids=["nan", "infinity", "nested-infinity", "surrogate-state", "surrogate-option", "surrogate-id"],
)
def test_non_finite_numbers_and_lone_surrogates_get_422(client: TestClient, raw: bytes, loc: list) -> None:
    detail = assert_validation_shape(client.post("/v1/systemone", content=raw, headers=JSON))
    assert detail[0]["loc"][: len(loc)] == loc
    json.dumps(detail, allow_nan=False)


def test_deep_nesting_is_a_4xx(client: TestClient) -> None:
    for depth in (70, 900, 100_000):
        state = "[" * depth + "]" * depth
        raw = f'{{"model":"jev-latest","state":{state},"questions":{{"q":{{"type":"noul"}}}}}}'.encode()
        r = client.post("/v1/systemone", content=raw, headers=JSON)
        assert 400 <= r.status_code < 500, (depth, r.status_code)
        assert r.headers["content-type"].startswith("application/json")


def test_huge_integers_and_wrong_content_types_are_4xx(client: TestClient) -> None:
    raw = b'{"model":"jev-latest","state":{"n":' + b"9" * 5000 + b'},"questions":{"q":{"type":"noul"}}}'
    assert 400 <= client.post("/v1/systemone", content=raw, headers=JSON).status_code < 500
    ok = json.dumps(BODY).encode()
    assert client.post("/v1/systemone", content=ok, headers={"content-type": "text/plain"}).status_code == 422


def _zstd(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(raw)


_DEEP_STATE = b'{"model":"jev-latest","state":' + b"[" * 1000 + b"]" * 1000 + b',"questions":{"q":{"type":"noul"}}}'
_LATIN1 = '{"model":"jev-latest","state":"caf\u00e9","questions":{"q":{"type":"noul"}}}'.encode("latin-1")
# (label, body bytes, extra headers): every way a body can fail to be JSON other than a syntax error
UNREADABLE: list[tuple[str, bytes, dict[str, str]]] = [
    ("not utf-8", b'{"model":"jev-latest","state":"\xff\xfe broken","questions":{}}', {}),
    ("latin-1 declared", _LATIN1, {"content-type": "application/json; charset=latin-1"}),
    ("arrays 1000 deep", b"[" * 1000 + b"]" * 1000, {}),
    ("objects 1000 deep", b'{"a":' * 1000 + b"1" + b"}" * 1000, {}),
    ("state 1000 deep", _DEEP_STATE, {}),
    ("5000-digit integer", b'{"model":"jev-latest","state":{"n":' + b"9" * 5000 + b'},"questions":{}}', {}),
    ("zstd of non-utf-8", _zstd(b'{"state":"\xc3\x28"}'), {"content-encoding": "zstd"}),
    ("zstd of latin-1", _zstd(_LATIN1), {"content-encoding": "zstd"}),
    ("zstd of 1000 deep", _zstd(_DEEP_STATE), {"content-encoding": "zstd"}),
    ("not zstd at all", b"not zstd", {"content-encoding": "zstd"}),
]


@pytest.mark.parametrize("route", ["/v1/systemone", "/api/v1/evaluate"])
@pytest.mark.parametrize("label,raw,headers", UNREADABLE, ids=[c[0] for c in UNREADABLE])
def test_unreadable_bodies_get_one_422_shape_on_both_apis(
    client: TestClient, route: str, label: str, raw: bytes, headers: dict[str, str]
) -> None:
    """Regression: these got a bare 400 "There was an error parsing the body", naming no field."""
    r = client.post(route, content=raw, headers={**JSON, **headers})
    (d,) = assert_validation_shape(r)
    assert d["loc"] == ["body"] and d["type"] == "json_invalid", d
    assert d["msg"].startswith("JSON decode error: ") and d["ctx"]["error"] in d["msg"], d
    assert "sys.set_int_max_str_digits" not in d["msg"]  # Python's advice is not the client's


def test_unknown_model_is_400_api_usage_error(client: TestClient) -> None:
    msg = assert_error_shape(client.post("/v1/systemone", json={**BODY, "model": "jev-9"}), 400, "api_usage_error")
    assert "jev-9" in msg


def test_unknown_route_is_404_not_found_and_get_on_post_is_405(client: TestClient) -> None:
    msg = assert_error_shape(client.post("/v1/nope", json=BODY), 404, "not_found")
    assert msg == "No route /v1/nope"
    r = client.get("/v1/systemone")
    assert_error_shape(r, 405, "method_not_allowed")
    assert "POST" in r.headers["allow"]


def test_image_assets_are_refused_with_400(client: TestClient) -> None:
    assert_error_shape(
        client.post("/v1/systemone", json={**BODY, "assets": {"<image:ab>": {}}}), 400, "api_usage_error"
    )
    files = {
        "request": (None, json.dumps(BODY), "application/json"),
        "asset-0": ("a.png", b"\x89PNG", "image/png"),
    }
    assert_error_shape(client.post("/v1/systemone", files=files), 400, "api_usage_error")


# -- bodies: size cap and zstd -------------------------------------------------------------------


def small_client(scripted_judge: Judge) -> TestClient:
    return TestClient(create_app(scripted_judge, max_body_bytes=4096))


def test_body_over_the_cap_is_413(scripted_judge: Judge) -> None:
    big = {**BODY, "state": "x" * 10_000}
    with small_client(scripted_judge) as c:
        assert_error_shape(c.post("/v1/systemone", json=big), 413, "request_too_large")

        def chunks():  # no Content-Length: the cap applies while reading
            for _ in range(10):
                yield b" " * 1000

        r = c.post("/v1/systemone", content=chunks(), headers=JSON)
        assert_error_shape(r, 413, "request_too_large")
        assert c.post("/v1/systemone", json=BODY).status_code == 200


def test_zstd_bodies_are_decoded(client: TestClient) -> None:
    raw = json.dumps({**BODY, "state": "The parcel arrived broken. " * 100}).encode()
    compressed = zstandard.ZstdCompressor().compress(raw)
    r = client.post("/v1/systemone", content=compressed, headers={**JSON, "content-encoding": "zstd"})
    assert r.status_code == 200, r.text
    assert list(r.json()["answers"]) == ["refund", "team", "anger"]


def test_zstd_bombs_garbage_and_unknown_encodings_are_4xx(scripted_judge: Judge) -> None:
    bomb = zstandard.ZstdCompressor().compress(b"[" + b" " * 1_000_000 + b"]")
    assert len(bomb) < 4096
    with small_client(scripted_judge) as c:
        r = c.post("/v1/systemone", content=bomb, headers={**JSON, "content-encoding": "zstd"})
        assert_error_shape(r, 413, "request_too_large")
        r = c.post("/v1/systemone", content=b"not zstd", headers={**JSON, "content-encoding": "zstd"})
        assert assert_validation_shape(r)[0]["type"] == "json_invalid"  # like every unreadable body
        r = c.post("/v1/systemone", content=b"{}", headers={**JSON, "content-encoding": "br"})
        assert_error_shape(r, 415, "unsupported_media_type")


# -- engine errors ---------------------------------------------------------------------------------


class FailingEngine(ScriptedEngine):
    """Scripted answers, except: a state containing "LONG" overflows, "BADQ" fails question 1's
    criteria, and "CRASH" raises a plain exception (a bug)."""

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        out = super().run_batch(requests)
        for i, req in enumerate(requests):
            state = str(req.state)
            if "CRASH" in state:
                raise RuntimeError("engine bug")
            if "LONG" in state:
                out[i] = ContextOverflowError(
                    "state + longest question is 40000 tokens; the limit is 8192",
                    part="state + longest question",
                    tokens=40000,
                    limit=8192,
                    field=("state",),
                )
            if "BADQ" in state:
                out[i] = InvalidRequestError("criteria: bad labels", field=("questions", 1, "criteria"))
        return out


def test_engine_errors_map_through_the_table(body: dict[str, Any]) -> None:
    with TestClient(create_app(Judge(FailingEngine())), raise_server_exceptions=False) as c:
        msg = assert_error_shape(c.post("/v1/systemone", json={**body, "state": "LONG"}), 413, "request_too_large")
        assert "8192" in msg
        detail = assert_validation_shape(c.post("/v1/systemone", json={**body, "state": "BADQ"}))
        assert detail[0]["loc"] == ["body", "questions", "team", "criteria"]  # index -> id
        msg = assert_error_shape(c.post("/v1/systemone", json={**body, "state": "CRASH"}), 500, "internal_error")
        assert "engine bug" not in msg  # internals stay in the log
        assert c.post("/v1/systemone", json=body).status_code == 200  # the server is still fine


# -- overload --------------------------------------------------------------------------------------


def assert_overloaded(r: httpx.Response) -> str:
    """Spec A.9 E6: 529 ``overloaded_error`` with Retry-After (s) and retry-after-ms."""
    msg = assert_error_shape(r, 529, "overloaded_error")
    assert int(r.headers["retry-after"]) >= 1 and int(r.headers["retry-after-ms"]) >= 1000
    return msg


def test_a_full_queue_answers_529_overloaded_with_retry_after() -> None:
    engine = GatedEngine()
    app = create_app(Judge(engine), max_queue=1)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            running = asyncio.ensure_future(c.post("/v1/systemone", json=BODY))
            await asyncio.to_thread(engine.entered.wait, 30)
            waiting = asyncio.ensure_future(c.post("/v1/systemone", json=BODY))
            for _ in range(5000):
                if app.state.scheduler.waiting == 1:
                    break
                await asyncio.sleep(0.002)
            refused = await c.post("/v1/systemone", json=BODY)
            item = {"input": "Refund?", "output": "Yes.", "context": ["Refunds: 30 days."]}
            # version 1: one engine request per item (version 2 sends one per chunk and a null chunk)
            refused_eval = await c.post("/api/v1/evaluate", json={"evaluators": ["chunk_relevance@1"], **item})
            engine.gate.set()
            metrics = await c.get("/metrics")
            return [await running, await waiting, refused, refused_eval, metrics]

    running, waiting, refused, refused_eval, metrics = asyncio.run(main())
    assert running.status_code == 200 and waiting.status_code == 200
    assert "queue is full" in assert_overloaded(refused)
    assert "queue is full" in assert_overloaded(refused_eval)
    assert 'logitjudge_rejected_requests_total{reason="queue_full"} 2.0' in metrics.text


class OutOfMemoryEngine(ScriptedEngine):
    """Every engine call runs out of memory (so even the split-down single request does)."""

    def run_batch(self, requests):  # type: ignore[override]
        raise MemoryError("simulated")


def test_out_of_memory_after_splitting_and_shutting_down_answer_529() -> None:
    with TestClient(create_app(Judge(OutOfMemoryEngine())), raise_server_exceptions=False) as c:
        assert "out of memory" in assert_overloaded(c.post("/v1/systemone", json=BODY))
    app = create_app(Judge(ScriptedEngine()))
    with TestClient(app) as c:
        asyncio.run(app.state.scheduler.close(timeout=1))  # shutdown has begun
        assert "shutting down" in assert_overloaded(c.post("/v1/systemone", json=BODY))
        item = {"input": "Refund?", "output": "Yes.", "context": ["Refunds: 30 days."]}
        r = c.post("/api/v1/evaluate", json={"evaluators": ["chunk_relevance"], **item})
        assert "shutting down" in assert_overloaded(r)
        health = c.get("/healthz")  # the probe, not the API: 503 tells a load balancer to move on
        assert health.status_code == 503 and health.json()["status"] == "draining"


def test_the_openapi_document_lists_529_with_its_retry_headers(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/systemone", "/api/v1/evaluate"):
        responses = paths[path]["post"]["responses"]
        assert "503" not in responses, path
        assert set(responses["529"]["headers"]) == {"Retry-After", "retry-after-ms"}, path
        assert "overloaded_error" in responses["529"]["description"]


# -- request limits: each a 422 naming the limit, each configurable --------------------------------


def assert_limit(r: httpx.Response, loc: list[Any], limit: str, cap: int) -> None:
    (d,) = assert_validation_shape(r)
    assert d["loc"] == loc, d
    assert d["ctx"]["limit"] == limit and d["ctx"]["max_length"] == cap, d
    assert limit in d["msg"] and f"--{limit.replace('_', '-')}" in d["msg"] and str(cap) in d["msg"]


def test_questions_and_string_length_limits_are_422_naming_the_limit(scripted_judge: Judge) -> None:
    app = create_app(scripted_judge, max_questions=3, max_text_chars=100)
    many = {f"q{i}": {"type": "noul"} for i in range(4)}
    with TestClient(app) as c:
        assert_limit(
            c.post("/v1/systemone", json={**BODY, "questions": many}),
            ["body", "questions"],
            "max_questions",
            3,
        )
        assert c.post("/v1/systemone", json={**BODY, "state": "x" * 100}).status_code == 200  # at the cap
        assert_limit(
            c.post("/v1/systemone", json={**BODY, "state": "x" * 101}),
            ["body", "state"],
            "max_text_chars",
            100,
        )
        nested = {**BODY, "state": {"doc": ["ok", {"deep": "y" * 101}]}}
        assert_limit(c.post("/v1/systemone", json=nested), ["body", "state", "doc", 1, "deep"], "max_text_chars", 100)
        long_option = {"type": "choice", "criteria": {"a" * 101: None, "b": "fine"}}
        assert_limit(
            c.post("/v1/systemone", json={**BODY, "questions": {"q": long_option}}),
            ["body", "questions", "q", "criteria"],
            "max_text_chars",
            100,
        )
        long_id = {"i" * 101: {"type": "noul"}}
        assert_limit(
            c.post("/v1/systemone", json={**BODY, "questions": long_id}),
            ["body", "questions", "i" * 101],
            "max_text_chars",
            100,
        )
    # the defaults admit the contract's own ranges (255 options) and a 200 kB state
    with TestClient(create_app(scripted_judge)) as c:
        options = {f"option {i}": None for i in range(255)}
        body = {
            **BODY,
            "state": "word " * 40_000,
            "questions": {"q": {"type": "choice", "criteria": options}},
        }
        assert c.post("/v1/systemone", json=body).status_code == 200


def test_evaluate_items_strings_and_chunk_questions_are_limited(scripted_judge: Judge) -> None:
    app = create_app(scripted_judge, max_items=2, max_text_chars=50, max_questions=3)
    item = {"input": "What is the refund window?", "output": "30 days.", "context": ["Refunds: 30 days."]}
    with TestClient(app) as c:
        ok = c.post("/api/v1/evaluate", json={"evaluators": ["chunk_relevance@1"], "items": [item, item]})
        assert ok.status_code == 200, ok.text
        three = {"evaluators": ["chunk_relevance@1"], "items": [item] * 3}
        assert_limit(c.post("/api/v1/evaluate", json=three), ["body", "items"], "max_items", 2)
        long_chunk = {
            "evaluators": ["chunk_relevance@1"],
            "items": [item, {**item, "context": ["ok", "z" * 51]}],
        }
        assert_limit(
            c.post("/api/v1/evaluate", json=long_chunk),
            ["body", "items", 1, "context", 1],
            "max_text_chars",
            50,
        )
        flat = {"evaluators": ["chunk_relevance@1"], **item, "output": "o" * 51}
        assert_limit(c.post("/api/v1/evaluate", json=flat), ["body", "output"], "max_text_chars", 50)
        chunks = {"evaluators": ["chunk_relevance@1"], **item, "context": [f"chunk {i}" for i in range(4)]}
        assert_limit(c.post("/api/v1/evaluate", json=chunks), ["body", "context"], "max_questions", 3)


def test_limits_out_of_range_are_refused_at_start(scripted_judge: Judge) -> None:
    for bad in ({"max_questions": 0}, {"max_items": 0}, {"max_text_chars": 0}, {"max_body_bytes": 10}):
        with pytest.raises(ValueError):
            create_app(scripted_judge, **bad)


def test_a_deep_body_is_json_invalid_whatever_the_recursion_limit(client: TestClient) -> None:
    """Regression: torch's inductor raises the process's recursion limit to 2,000 when it compiles
    (flex attention), after which Python's parser read a 1,000-deep body and validation answered
    "field required" instead; the middleware's depth bound does not depend on that limit."""
    import sys

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 5000))
    try:
        for raw in (_DEEP_STATE, b"[" * 300 + b"]" * 300):
            (d,) = assert_validation_shape(client.post("/v1/systemone", content=raw, headers=JSON))
            assert d["loc"] == ["body"] and d["type"] == "json_invalid" and "256 levels" in d["msg"], d
    finally:
        sys.setrecursionlimit(before)
    shallow = {**BODY, "state": {"rows": [[i, [i]] for i in range(400)]}}  # 800 brackets, 3 deep: not refused
    r = client.post("/v1/systemone", content=json.dumps(shallow).encode(), headers=JSON)
    assert r.status_code != 422 or all(d["type"] != "json_invalid" for d in r.json()["detail"]), r.text


def test_the_depth_bound_skips_strings_and_counts_every_bracket_kind() -> None:
    from logitjudge.server.middleware import MAX_JSON_DEPTH, _too_deep

    n = MAX_JSON_DEPTH
    assert _too_deep(bytearray(b"[" * n + b"]" * n)) is None
    assert _too_deep(bytearray(b'{"a":' * n + b"[1]" + b"}" * n)) is not None  # n objects + 1 array
    assert _too_deep(bytearray(b'["' + b"[" * 5000 + b'"]')) is None  # brackets inside a string
    assert _too_deep(bytearray(b'["\\"' + b"[" * 5000 + b'"]')) is None  # an escaped quote does not end it
    assert _too_deep(bytearray(b'["\\\\"' + b"[" * 5000 + b"]" * 5000 + b"]")) is not None  # an escaped backslash does
    assert _too_deep(bytearray(b"[" + b"[[]]," * 10_000 + b"[]]")) is None  # wide and shallow
