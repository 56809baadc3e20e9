"""Bad command lines are exit 2 with a message, before any model loads (a new user's trial found
tracebacks and silent runs), and the evaluate run record holds every flag that changes answers."""

from __future__ import annotations

import json

import pytest

from logitjudge.cli import main
from logitjudge.judge import Judge


@pytest.fixture
def no_model(monkeypatch):
    """``Judge.load`` fails the test: the command must stop before it."""

    def refuse(*_a, **_kw):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Judge, "load", classmethod(refuse))


def _row_file(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "a", "output": "x", "context": ["c"]}) + "\n")
    return data


@pytest.mark.parametrize(
    "argv",
    [
        ["ask", "req.json", "--rotations", "0"],
        ["ask", "req.json", "--engine-row-tokens", "-5"],
        ["evaluate", "d.jsonl", "--out", "o.jsonl", "--limit", "0"],
        ["evaluate", "d.jsonl", "--out", "o.jsonl", "--batch-size", "0"],
        ["serve", "--port", "99999"],
        ["serve", "--max-questions", "0"],
        ["serve", "--max-batch-requests", "0"],
    ],
)
def test_out_of_range_flags_are_usage_errors(no_model, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "must be at least 1" in err or "a port is 1-65535" in err


def test_serve_refuses_a_missing_keys_file_and_bad_limits_before_loading(no_model, tmp_path, capsys):
    assert main(["serve", "--api-keys-file", str(tmp_path / "nosuch")]) == 2
    assert "--api-keys-file" in capsys.readouterr().err
    assert main(["serve", "--max-body-bytes", "10"]) == 2
    assert "max_body_bytes" in capsys.readouterr().err


def test_evaluate_refuses_directories_and_its_own_data_as_out(no_model, tmp_path, capsys):
    data = _row_file(tmp_path)
    base = ["evaluate", "--evaluators", "faithfulness", "--no-progress"]
    assert main([*base, str(data), "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([*base, str(tmp_path), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([*base, str(data), "--out", str(data), "--overwrite"]) == 2
    assert "is the data file itself" in capsys.readouterr().err
    assert json.loads(data.read_text())["id"] == "a"  # the data is untouched


def test_a_bad_threshold_and_a_binary_file_are_named(no_model, tmp_path, capsys):
    data = _row_file(tmp_path)
    out = str(tmp_path / "o.jsonl")
    assert main(["evaluate", str(data), "--out", out, "--threshold", "faithfulness=abc"]) == 2
    assert "--threshold" in capsys.readouterr().err
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00junk\n")
    assert main(["evaluate", str(binary), "--out", out, "--evaluators", "RAG"]) == 2
    assert f"{binary}: not UTF-8" in capsys.readouterr().err


def test_ask_with_an_unknown_device_is_a_clean_error(tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul"}}}))
    assert main(["ask", str(req), "--device", "tpu"]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err


def test_rotations_are_part_of_the_engine_a_results_file_remembers(tmp_path, monkeypatch, capsys):
    """Resuming with another --rotations would mix answers of two configurations: refused."""
    from support.scripted import ScriptedEngine

    class Engine(ScriptedEngine):
        def describe(self):
            return {**super().describe(), "fingerprint": "f", "prompt_version": "p"}

    monkeypatch.setattr(
        Judge,
        "load",
        classmethod(lambda cls, model=None, **kw: cls(Engine(), default_rotations=kw.get("default_rotations", 1))),
    )
    data = _row_file(tmp_path)
    out = str(tmp_path / "o.jsonl")
    base = ["evaluate", str(data), "--out", out, "--evaluators", "faithfulness", "--no-progress"]
    assert main(base) == 0
    more = tmp_path / "d.jsonl"
    more.write_text(more.read_text() + json.dumps({"id": "b", "output": "y", "context": ["c"]}) + "\n")
    assert main([*base, "--rotations", "3"]) == 2
    assert "default_rotations" in capsys.readouterr().err


def test_a_configuration_error_while_loading_is_a_usage_error(tmp_path, monkeypatch, capsys):
    """A bad device, dtype or backend is the operator's to fix (exit 2, like a bad flag), not a
    failure of the run (exit 1); it names the option."""
    (tmp_path / "misconfigured.py").write_text(
        "from logitjudge.errors import ConfigurationError\n\n"
        "def make_judge():\n"
        "    raise ConfigurationError(\"unknown backend 'llamacpp'\", field=('backend',))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul"}}}))
    assert main(["ask", str(req), "--judge-factory", "misconfigured"]) == 2
    said = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["detail"]
    assert said == {"error_type": "configuration_error", "message": "unknown backend 'llamacpp'", "field": ["backend"]}
    assert main(["serve", "--judge-factory", "misconfigured"]) == 2
    said = json.loads(capsys.readouterr().err.strip().splitlines()[-1])["detail"]
    assert said == {"error_type": "configuration_error", "message": "cannot load the model: unknown backend 'llamacpp'"}
