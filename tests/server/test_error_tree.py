"""The one exception tree and its one status table (STYLE.md practice 6).

- errors carry typed fields set by their constructors: no module bolts ``.errors`` onto an
  exception, reads it back with ``getattr``, or mutates an instance's ``error_type``;
- every ``LogitJudgeError`` subclass anywhere in the package has a row in the server's
  ``STATUS_TABLE`` (or is listed as load-time only), and no row is shadowed by an earlier one;
- "unknown model" is one error, whichever path raises it (System One, evaluate, evaluator runs);
- a client that leaves gets the table's 499, counted in the metrics.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY, GatedEngine, rising
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.errors import ConfigurationError, LogitJudgeError, RequestError, UnknownModelError
from logitjudge.rubrics.api import evaluate
from logitjudge.server.app import create_app
from logitjudge.server.errors import LOAD_TIME_ONLY, STATUS_TABLE, logitjudge_error_response

PACKAGE = Path(__file__).resolve().parents[2] / "logitjudge"


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out.append((name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))
    return out


def _assigned_attributes(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, attribute) of every assignment to ``something.attr`` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute):
                    found.append((sub.lineno, sub.attr))
    return found


def test_no_module_bolts_errors_onto_an_exception_or_reads_them_back() -> None:
    offences = []
    for name, tree in _modules():
        for line, attr in _assigned_attributes(tree):
            if attr == "errors":
                offences.append(f"{name}:{line} sets .errors")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "errors"
            ):
                offences.append(f"{name}:{node.lineno} uses getattr(..., 'errors')")
    assert offences == []


def test_no_module_mutates_an_error_type() -> None:
    # Class bodies declare ``error_type = "..."`` (a Name target); ``x.error_type = ...`` mutates.
    assigned = [(name, line, attr) for name, tree in _modules() for line, attr in _assigned_attributes(tree)]
    offences = [f"{name}:{line}" for name, line, attr in assigned if attr == "error_type"]
    assert offences == []


def _error_classes() -> list[type[LogitJudgeError]]:
    """Every LogitJudgeError subclass defined in the package (found in the source, then imported)."""
    bases_of: dict[tuple[str, str], list[str]] = {}
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                bases_of[(module, node.name)] = names
    error_names = {"LogitJudgeError"}
    grew = True
    while grew:
        grew = False
        for (_, cls), bases in bases_of.items():
            if cls not in error_names and error_names.intersection(bases):
                error_names.add(cls)
                grew = True
    classes = []
    for (module, cls), _ in bases_of.items():
        if cls in error_names and cls != "LogitJudgeError":
            obj = getattr(importlib.import_module(module), cls)
            assert issubclass(obj, LogitJudgeError), f"{module}.{cls}"
            classes.append(obj)
    return classes


def test_every_error_of_the_tree_has_a_row_in_the_status_table() -> None:
    classes = _error_classes()
    assert len(classes) >= 14  # the tree, the rubrics' two and the server edge's four
    listed = {cls for cls, _ in STATUS_TABLE}
    # A client's errors (logitjudge.client, ``evaluate --server``) are raised on this side of a server, never by one.
    client_side = [c for c in classes if c.__module__ == "logitjudge.client.errors"]
    assert len(client_side) == 6
    missing = [c.__qualname__ for c in classes if c not in listed and c not in LOAD_TIME_ONLY and c not in client_side]
    assert missing == []
    assert LogitJudgeError in listed


def test_no_row_of_the_status_table_is_shadowed_by_an_earlier_one() -> None:
    rows = [cls for cls, _ in STATUS_TABLE]
    shadowed = [
        f"{later.__name__} after {earlier.__name__}"
        for i, earlier in enumerate(rows)
        for later in rows[i + 1 :]
        if issubclass(later, earlier)
    ]
    assert shadowed == []
    statuses = [status for _, status in STATUS_TABLE]
    assert all(400 <= s <= 599 for s in statuses)


def test_a_configuration_error_is_the_operators_never_a_4xx() -> None:
    """A bad device, dtype or backend is not the client's fault: no 4xx, whatever its message."""
    response = logitjudge_error_response(ConfigurationError("unknown backend 'x'", field=("backend",)))
    assert response.status_code == 500 and not issubclass(ConfigurationError, RequestError)
    assert json.loads(response.body)["detail"] == {
        "error_type": "configuration_error",
        "message": "unknown backend 'x'",
    }


# -- one unknown-model error --------------------------------------------------------------------


def _scripted(_state: Any, question: Any) -> list[float]:
    return [1.0] * len(question.options)


@pytest.fixture
def judge() -> Judge:
    return Judge(ScriptedEngine(_scripted, name="scripted-1"))


UNKNOWN = "Unknown model: 'nope'; this server serves 'scripted-1' (also as jev-latest)"


def test_the_three_unknown_model_paths_give_the_same_error(judge: Judge) -> None:
    item = {"input": "q", "output": "a", "context": ["c"]}
    with TestClient(create_app(judge), raise_server_exceptions=False) as client:
        systemone = client.post("/v1/systemone", json={**BODY, "model": "nope"})
        evaluate_http = client.post("/api/v1/evaluate", json={"evaluators": ["faithfulness"], "model": "nope", **item})
    with pytest.raises(UnknownModelError) as raised:
        evaluate(judge, [item], ["faithfulness"], model="nope")  # the runner's check, no HTTP
    with pytest.raises(UnknownModelError) as asked:
        judge.ask({**BODY, "model": "nope"})  # the Python API

    assert systemone.status_code == evaluate_http.status_code == 400
    assert systemone.content == evaluate_http.content
    detail = systemone.json()["detail"]
    assert detail["error_type"] == "api_usage_error"
    for exc in (raised.value, asked.value):
        assert exc.message == detail["message"] == UNKNOWN
        assert exc.field == ("model",) and exc.requested == "nope" and exc.served == "scripted-1"
    assert [r for call in judge.engine.calls for r in call] == []  # no request reached the engine


# -- 499 through the table ----------------------------------------------------------------------


def test_a_client_that_leaves_gets_the_tables_499() -> None:
    engine = GatedEngine(rising)
    app = create_app(Judge(engine))
    raw = json.dumps(BODY).encode()
    sent: list[dict[str, Any]] = []

    async def scenario() -> None:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": raw, "more_body": False}
            while not engine.entered.is_set():  # leave once the engine holds the request
                await asyncio.sleep(0.01)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/systemone",
            "raw_path": b"/v1/systemone",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        try:
            await app(scope, receive, send)
        finally:
            engine.gate.set()
            await app.state.scheduler.close(timeout=10)

    asyncio.run(scenario())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    rendered = app.state.metrics.render().decode()
    assert 'logitjudge_http_requests_total{method="POST",route="/v1/systemone",status="499"} 1.0' in rendered
