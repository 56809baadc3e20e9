"""API keys: off by default (any Authorization header ignored); on with keys (Bearer required)."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY

from logitjudge import Judge
from logitjudge.cli.serve import add_serve_parser
from logitjudge.server.app import create_app

KEYS = ("k-one", "k-two")


@pytest.fixture
def secured(scripted_judge: Judge):
    with TestClient(create_app(scripted_judge, api_keys=KEYS)) as c:
        yield c


def _auth_error(r) -> str:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    detail = r.json()["detail"]
    assert detail["error_type"] == "authentication_error" and isinstance(detail["message"], str)
    return detail["message"]


def test_auth_off_accepts_and_ignores_any_authorization_header(client: TestClient) -> None:
    for header in (
        {},
        {"Authorization": "Bearer jevcompat-no-key"},
        {"Authorization": "Basic Zm9vOmJhcg=="},
        {"Authorization": ""},
        {"x-api-key": "whatever"},
    ):
        assert client.post("/v1/systemone", json=BODY, headers=header).status_code == 200
        assert client.get("/v1/models", headers=header).status_code == 200


def test_auth_on_requires_a_configured_bearer_key(secured: TestClient) -> None:
    _auth_error(secured.post("/v1/systemone", json=BODY))
    _auth_error(secured.get("/v1/models"))
    for bad in (
        "Bearer wrong",
        "Bearer k-one2",
        "Bearer k-on",
        "Bearer ",
        "Basic k-one",
        "k-one",
        "Bearer kéy",
    ):
        _auth_error(secured.post("/v1/systemone", json=BODY, headers={"Authorization": bad.encode("utf-8")}))
    _auth_error(secured.post("/v1/systemone", json=BODY, headers={"x-api-key": "k-one"}))  # Bearer only
    for key in KEYS:
        r = secured.post("/v1/systemone", json=BODY, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
    assert secured.post("/v1/systemone", json=BODY, headers={"Authorization": "bearer k-two"}).status_code == 200


def test_auth_on_leaves_probes_metrics_and_docs_open(secured: TestClient) -> None:
    for path in ("/healthz", "/metrics", "/docs", "/openapi.json"):
        assert secured.get(path).status_code == 200, path
    assert secured.get("/healthz").json()["auth"] is True


def test_refusals_are_counted_under_their_route(secured: TestClient) -> None:
    secured.post("/v1/systemone", json=BODY)
    secured.post("/v1/elsewhere", json=BODY)
    text = secured.get("/metrics").text
    assert 'logitjudge_http_requests_total{method="POST",route="/v1/systemone",status="401"} 1.0' in text
    assert 'logitjudge_http_requests_total{method="POST",route="unmatched",status="401"} 1.0' in text


def test_auth_is_checked_before_the_body_is_read(scripted_judge: Judge) -> None:
    with TestClient(create_app(scripted_judge, api_keys=KEYS, max_body_bytes=2048)) as c:
        _auth_error(c.post("/v1/systemone", json={**BODY, "state": "x" * 10_000}))


def test_keys_are_never_logged(scripted_judge: Judge, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with TestClient(create_app(scripted_judge, api_keys=KEYS)) as c:
        c.post("/v1/systemone", json=BODY, headers={"Authorization": "Bearer k-one"})
        c.post("/v1/systemone", json=BODY, headers={"Authorization": "Bearer not-a-key"})
    assert all(k not in caplog.text for k in (*KEYS, "not-a-key"))


def test_keys_with_whitespace_are_refused_at_start(scripted_judge: Judge) -> None:
    with pytest.raises(ValueError):
        create_app(scripted_judge, api_keys=["has space"])


def test_serve_parser_collects_repeatable_keys() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["serve", "--api-key", "a", "--api-key", "b", "--port", "9001", "--max-num-batched-tokens", "512"]
    )
    assert args.api_key == ["a", "b"] and args.port == 9001 and args.host == "127.0.0.1"
    assert args.max_num_batched_tokens == 512 and args.max_queue == 256 and args.model is None
    # the one set of model flags (logitjudge.cli.add_model_args): the engine's own defaults apply
    assert (args.strategy, args.attn, args.calibration, args.max_row_tokens) == ("auto", "auto", "shipped", None)
    assert args.rotations is None and args.judge_factory is None
    assert args.max_batch_requests is None  # the device decides (see default_batching)
    assert args.api_keys_file is None
    limits = parser.parse_args(
        [
            "serve",
            "--api-keys-file",
            "/k",
            "--max-body-bytes",
            "4096",
            "--max-questions",
            "8",
            "--max-items",
            "5",
            "--max-text-chars",
            "1000",
            "--drain-timeout",
            "5",
        ]
    )
    assert (limits.api_keys_file, limits.max_body_bytes, limits.max_questions, limits.max_items) == ("/k", 4096, 8, 5)
    assert (limits.max_text_chars, limits.drain_timeout) == (1000, 5.0)


def test_keys_file_skips_blank_lines_and_comments(tmp_path) -> None:
    from logitjudge.settings import read_api_keys_file

    path = tmp_path / "keys"
    path.write_text("# operator keys\nk-one\n\n  k-two  \n#k-old\n")
    assert read_api_keys_file(path) == ("k-one", "k-two")
    with pytest.raises(OSError):
        read_api_keys_file(tmp_path / "missing")


# -- keys through the real `logitjudge serve` argument parsing (scripted judge, no uvicorn) -----------


@pytest.fixture
def serve_main(monkeypatch: pytest.MonkeyPatch, scripted_judge: Judge):
    """``logitjudge.cli.main`` with ``Judge.load`` and ``uvicorn.run`` replaced: returns the app
    ``serve`` would have run. The environment starts with no key variables."""
    import uvicorn

    from logitjudge import cli
    from logitjudge.judge import Judge as JudgeClass

    served: list = []
    monkeypatch.setattr(JudgeClass, "load", classmethod(lambda cls, *a, **kw: scripted_judge))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    from logitjudge.cli import serve as serve_cli  # serve runs uvicorn.Server through _run_uvicorn

    monkeypatch.setattr(serve_cli, "_run_uvicorn", lambda config, started: served.append(config.app))
    for name in ("LOGITJUDGE_API_KEYS", "LOGITJUDGE_API_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    package_logger = logging.getLogger("logitjudge")
    level = package_logger.level  # run_serve sets it from --log-level; later tests expect it unset

    def run(*argv: str):
        served.clear()
        assert cli.main(["serve", "--port", "8123", *argv]) == 0
        (app,) = served
        return app

    yield run
    package_logger.setLevel(level)


def _accepts(app, key: str) -> bool:
    with TestClient(app) as c:
        assert c.post("/v1/systemone", json=BODY).status_code == 401
        r = c.post("/v1/systemone", json=BODY, headers={"Authorization": f"Bearer {key}"})
        return r.status_code == 200


_FLAG_WARNING = "--api-key"


def _flag_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("logitjudge") and _FLAG_WARNING in r.getMessage()
    ]


def test_serve_reads_keys_from_the_environment_and_the_keys_file_without_a_warning(
    serve_main, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("LOGITJUDGE_API_KEYS", "env-key-1, env-key-2")
    app = serve_main()
    assert app.state.config.api_keys == ("env-key-1", "env-key-2")
    assert _accepts(app, "env-key-2")
    monkeypatch.delenv("LOGITJUDGE_API_KEYS")

    keys = tmp_path / "keys"
    keys.write_text("# operator keys\nfile-key-1\n")
    monkeypatch.setenv("LOGITJUDGE_API_KEYS_FILE", str(keys))
    assert serve_main().state.config.api_keys == ("file-key-1",)
    monkeypatch.delenv("LOGITJUDGE_API_KEYS_FILE")
    app = serve_main("--api-keys-file", str(keys))
    assert app.state.config.api_keys == ("file-key-1",) and _accepts(app, "file-key-1")

    assert serve_main().state.config.api_keys == ()  # nothing set: auth off
    assert _flag_warnings(caplog) == []
    assert all(k not in caplog.text for k in ("env-key-1", "env-key-2", "file-key-1"))


def test_serve_warns_when_keys_come_from_the_command_line(
    serve_main, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: ``--api-key KEY`` put the key in ``ps`` output and nothing said so."""
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("LOGITJUDGE_API_KEYS", "env-key-1")
    app = serve_main("--api-key", "flag-key-1", "--api-key", "flag-key-2")
    assert app.state.config.api_keys == ("flag-key-1", "flag-key-2", "env-key-1")
    assert _accepts(app, "flag-key-1")
    (warning,) = _flag_warnings(caplog)
    assert "2 API key(s)" in warning and "LOGITJUDGE_API_KEYS" in warning and "--api-keys-file" in warning
    assert "ps" in warning
    assert all(k not in caplog.text for k in ("flag-key-1", "flag-key-2", "env-key-1"))
