"""Fuzz both APIs from the app's own OpenAPI schema (schemathesis): no 5xx, every 4xx documented.

The fuzzer is ``benchmarks/reliability/fuzz.py`` (run longer there); here it runs a bounded, seeded number of
cases per operation and mode in-process, over the scripted engine, and the test fails on the first
response that breaks spec A.9: a 5xx, a non-JSON error, a 422 without ``detail[]`` whose ``loc``
starts with ``"body"``, another 4xx without ``{"detail": {"error_type", "message"}}``, or a 2xx
that does not parse as the route's response.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 100


def _load_fuzzer():
    spec = importlib.util.spec_from_file_location("lj_fuzz", ROOT / "benchmarks" / "reliability" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_check_response_catches_what_it_must() -> None:
    fuzz = _load_fuzzer()
    json_type = {"content-type": "application/json"}
    ok_422 = json.dumps({"detail": [{"loc": ["body", "state"], "msg": "Field required", "type": "missing"}]})
    ok_400 = json.dumps({"detail": {"error_type": "api_usage_error", "message": "Unknown model: x"}})
    assert fuzz.check_response("/v1/systemone", 422, json_type, ok_422) is None
    assert fuzz.check_response("/v1/systemone", 400, json_type, ok_400) is None
    assert fuzz.check_response("/v1/systemone", 500, json_type, ok_400)  # any 5xx
    assert fuzz.check_response("/v1/systemone", 422, json_type, ok_400)  # 422 in the other shape
    bad_loc = ok_422.replace('["body", "state"]', '["query", "state"]')
    assert fuzz.check_response("/v1/systemone", 422, json_type, bad_loc)
    assert fuzz.check_response("/v1/systemone", 400, json_type, '{"detail": "text"}')
    assert fuzz.check_response("/v1/systemone", 400, {"content-type": "text/plain"}, ok_400)
    assert fuzz.check_response("/v1/systemone", 503, json_type, ok_400)  # no Retry-After
    assert fuzz.check_response("/v1/systemone", 200, json_type, '{"answers": 1}')


def test_fuzz_both_apis_from_the_openapi_schema(capsys: pytest.CaptureFixture[str]) -> None:
    fuzz = _load_fuzzer()
    report = fuzz.fuzz(fuzz.scripted_app(), examples=EXAMPLES, seed=7)
    with capsys.disabled():
        print(f"\nfuzz: {report.total} cases in {report.seconds:.0f} s: {report.cases}")
    assert report.violations == [], json.dumps(report.violations[:5], indent=1)
    for op in ("POST /v1/systemone", "POST /api/v1/evaluate"):
        for mode in ("positive", "pinned", "negative"):
            assert report.cases[f"{op} {mode}"] >= EXAMPLES // 2, (op, mode, report.cases)
        # the pinned cases reach the engine: some are answered
        assert report.statuses[f"{op} pinned"].get(200, 0) > 0, report.statuses
    assert report.statuses["GET /v1/models positive"] == {200: report.cases["GET /v1/models positive"]}
