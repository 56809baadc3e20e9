"""Offline by construction: no subcommand reaches a network unless downloads are allowed.

Every command runs in a subprocess whose ``sitecustomize`` (on ``PYTHONPATH``) guards the socket
layer: a DNS lookup of a non-loopback name or a connect to a non-loopback address is recorded in a
log file and refused; ``HTTPS_PROXY``/``HTTP_PROXY`` point to an unroutable address, so a client
that bypassed the guard would hang rather than succeed. The hub libraries' offline switches
(``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``) are removed from the environment: what keeps the
commands offline must be logitjudge itself. A positive control shows the guard catches a real
attempt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HUB_ID = "Qwen/Qwen2.5-7B-Instruct"

GUARD = textwrap.dedent(
    """
    import os, socket

    _LOG = os.environ["LJ_NET_LOG"]
    _LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "", None}

    def _record(kind, target):
        with open(_LOG, "a") as fh:
            fh.write(f"{kind} {target!r}\\n")
        raise OSError(f"network disabled by the test's socket guard: {kind} {target!r}")

    def _is_loopback(host):
        return host in _LOOPBACK or (isinstance(host, str) and host.startswith("127."))

    _getaddrinfo = socket.getaddrinfo
    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback(host):
            _record("getaddrinfo", host)
        return _getaddrinfo(host, *args, **kwargs)
    socket.getaddrinfo = getaddrinfo

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            _record("connect", address)
    def connect(self, address):
        _check(self, address)
        return _connect(self, address)
    def connect_ex(self, address):
        _check(self, address)
        return _connect_ex(self, address)
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    """
)


@pytest.fixture()
def guarded(tmp_path):
    """``run(*argv)``: a command under the socket guard -> (CompletedProcess, recorded attempts)."""
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "net.log"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.pop("HF_DATASETS_OFFLINE", None)
    env.pop("LOGITJUDGE_ALLOW_DOWNLOAD", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(guard_dir), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        LJ_NET_LOG=str(log),
        HTTPS_PROXY="http://10.255.255.1:3128",
        HTTP_PROXY="http://10.255.255.1:3128",
        https_proxy="http://10.255.255.1:3128",
        http_proxy="http://10.255.255.1:3128",
        NO_PROXY="",
        TOKENIZERS_PARALLELISM="false",
    )

    def run(*argv: str, timeout: float = 300, extra_env: dict[str, str] | None = None):
        proc = subprocess.run(
            argv,
            cwd=tmp_path,
            env={**env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        attempts = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return proc, attempts

    return run


def _cli(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "logitjudge.cli", *args)


def _assert_lists_valid_names(stderr: str) -> None:
    """The last stderr line (a JSON error for ask/serve, plain text for evaluate/calibrate)."""
    message = stderr.strip().splitlines()[-1]
    if message.startswith("{"):
        message = json.loads(message)["detail"]["message"]
    assert HUB_ID in message
    for name in ("smollm2-135m", "qwen2.5-coder-1.5b", "local transformers model directory", ".gguf file"):
        assert name in message, message
    assert "--allow-download" in message and "LOGITJUDGE_ALLOW_DOWNLOAD=1" in message


def test_the_guard_catches_a_real_attempt(guarded):
    """Positive control: a plain HTTPS request under the guard is recorded and refused."""
    code = textwrap.dedent(
        """
        import urllib.request
        try:
            urllib.request.urlopen("https://huggingface.co", timeout=5)
        except Exception as exc:
            print(type(exc).__name__)
        """
    )
    proc, attempts = guarded(sys.executable, "-c", code, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert attempts, "the guard recorded nothing: the offline assertions below would prove nothing"


@pytest.mark.parametrize(
    "argv",
    [
        ("ask", str(ROOT / "examples" / "support_ticket.json")),
        ("serve", "--port", "8799"),
        ("evaluate", str(ROOT / "examples" / "rag_sample.jsonl"), "--evaluators", "RAG", "--out", "out.jsonl"),
        ("calibrate", str(ROOT / "examples" / "rag_sample.jsonl"), "--out", "calib.json"),
    ],
    ids=["ask", "serve", "evaluate", "calibrate"],
)
def test_a_hub_id_fails_fast_offline_naming_the_valid_models(guarded, argv):
    proc, attempts = guarded(*_cli(*argv, "--model", HUB_ID), timeout=120)
    assert attempts == [], attempts
    assert proc.returncode in (1, 2), proc.stderr
    _assert_lists_valid_names(proc.stderr)


def test_help_of_every_subcommand_is_offline(guarded):
    for sub in ("ask", "serve", "evaluate", "calibrate", "compare"):
        proc, attempts = guarded(*_cli(sub, "--help"), timeout=60)
        assert proc.returncode == 0 and attempts == [], (sub, proc.stderr, attempts)


def test_ask_and_evaluate_on_the_embedded_model_never_touch_a_network(guarded, tmp_path):
    """A real load (conversion included on a cold cache) and real answers, with no attempt."""
    request = tmp_path / "req.json"
    request.write_text(
        json.dumps(
            {
                "model": "jev-latest",
                "state": "I was charged twice for March. Please refund it.",
                "questions": {"refund": {"type": "noul", "instructions": "Is a refund asked for?"}},
            }
        )
    )
    proc, attempts = guarded(*_cli("ask", str(request), "--model", "smollm2-135m"))
    assert proc.returncode == 0, proc.stderr
    assert attempts == [], attempts
    assert "refund" in json.loads(proc.stdout)["answers"]
    assert "ready: smollm2-135m-instruct" in proc.stderr  # the load's status lines

    data = tmp_path / "rows.jsonl"
    data.write_text(
        json.dumps({"id": "a", "input": "Capital of France?", "output": "Paris.", "context": ["Paris is the capital."]})
        + "\n"
    )
    proc, attempts = guarded(
        *_cli("evaluate", str(data), "--evaluators", "faithfulness", "--out", "o.jsonl", "--model", "smollm2-135m")
    )
    assert proc.returncode == 0, proc.stderr
    assert attempts == [], attempts


def test_a_missing_path_and_a_directory_without_config_list_the_valid_models(tmp_path):
    from logitjudge.engine.model import resolve_model
    from logitjudge.errors import UnsupportedModelError

    for spec in (str(tmp_path / "nope"), str(tmp_path / "model.gguf"), str(tmp_path), "gpt2-but-not-cached"):
        with pytest.raises(UnsupportedModelError, match="valid --model values here") as err:
            resolve_model(spec)
        assert "smollm2-135m" in str(err.value)
