"""One set of defaults: ``EngineConfig``, ``SchedulerConfig`` and ``ServerConfig`` hold them, and
every signature and CLI flag that has a default reads it from there.

Regressions pinned here: the scheduler's and the server's defaults were copied into
``ServerConfig``, ``create_app``, ``logitjudge serve``'s flags and ``Scheduler``; the engine's into
``Engine``, ``Engine.load``, ``Judge.load``, ``Runner`` and the CLI's model flags;
``MAX_CHOICE_OPTIONS`` was defined twice; and one name, ``max_num_batched_tokens``, meant both the
scheduler's budget across requests and the engine's packed-row size (now ``max_row_tokens``,
in Python and in ``describe()``; the old name is the scheduler's alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import warnings
from pathlib import Path

import pytest

from logitjudge.engine.config import ATTN_CHOICES, STRATEGIES, EngineConfig, SchedulerConfig, VllmConfig
from logitjudge.errors import ConfigurationError, RequestError
from logitjudge.server.config import ACCELERATOR_BATCHING, CPU_BATCHING, ServerConfig
from logitjudge.server.limits import RequestLimits

PACKAGE = Path(__file__).resolve().parents[2] / "logitjudge"


def _defaults(fn) -> dict:
    params = inspect.signature(fn).parameters.items()
    return {name: p.default for name, p in params if p.default is not inspect.Parameter.empty}


def _serve_parser() -> argparse.ArgumentParser:
    from logitjudge.cli.serve import add_serve_parser

    parser = argparse.ArgumentParser()
    return add_serve_parser(parser.add_subparsers(dest="command"))


def _help(parser: argparse.ArgumentParser, dest: str) -> str:
    (action,) = [a for a in parser._actions if a.dest == dest]
    return (action.help or "") % {"default": action.default}


# -- the CLI reads its defaults from the configs --------------------------------------------------


SERVE_FLAGS = {  # ServerConfig field -> the serve flag's dest
    "max_queue": "max_queue",
    "max_body_bytes": "max_body_bytes",
    "drain_timeout": "drain_timeout",
    "max_questions": "max_questions",
    "max_items": "max_items",
    "max_text_chars": "max_text_chars",
    "strict_wire": "strict_wire",
}


def test_the_serve_flags_default_to_the_server_config():
    parser = _serve_parser()
    args = parser.parse_args([])
    for field, dest in SERVE_FLAGS.items():
        assert getattr(args, dest) == getattr(ServerConfig, field), field
    # every ServerConfig field but the keys and the device-dependent batching has a flag
    fields = {f.name for f in dataclasses.fields(ServerConfig)}
    assert fields - set(SERVE_FLAGS) == {
        "api_keys",
        "max_num_batched_tokens",
        "max_batch_requests",
        "max_concurrent_batches",
    }
    assert args.api_key == [] and ServerConfig.api_keys == ()
    # the batching flags default to None (the device decides) and their help names both defaults
    assert args.max_num_batched_tokens is None and args.max_batch_requests is None
    tokens, requests = _help(parser, "max_num_batched_tokens"), _help(parser, "max_batch_requests")
    assert f"{CPU_BATCHING[0]} on CPU" in tokens and f"{ACCELERATOR_BATCHING[0]} on GPU" in tokens
    assert f"{CPU_BATCHING[1]} on CPU" in requests and f"{ACCELERATOR_BATCHING[1]} on GPU" in requests
    assert "--engine-row-tokens" in tokens  # the other budget is named, not confused
    assert "16 MiB" in _help(parser, "max_body_bytes") and ServerConfig.max_body_bytes == 16 << 20
    assert "(default 60.0)" in _help(parser, "drain_timeout")


def test_the_flags_help_is_the_config_fields_docstring():
    """Flags derived from the config dataclasses: each one's help starts from its field's
    docstring, so a meaning is written once (cli.config_args)."""
    from logitjudge.cli.config_args import field_docs, first_sentence, plain

    parser = _serve_parser()
    engine_fields = ["device", "dtype", "strategy", "attn", "max_row_tokens", "prompt_version", "state_cache_mb"]
    derived = {
        ServerConfig: [f.name for f in dataclasses.fields(ServerConfig) if f.name != "api_keys"],
        VllmConfig: [f.name for f in dataclasses.fields(VllmConfig)],
        EngineConfig: [*engine_fields, "backend"],
    }
    for cls, names in derived.items():
        for name in names:
            doc = first_sentence(plain(field_docs(cls)[name]))
            assert doc and doc in _help(parser, name), (cls.__name__, name)
    args = parser.parse_args([])
    assert all(getattr(args, f.name) == f.default for f in dataclasses.fields(VllmConfig))
    assert parser.parse_args(["--no-enforce-eager"]).enforce_eager is False


def test_the_model_flags_default_to_the_engine_config():
    from logitjudge.cli import add_model_args

    parser = argparse.ArgumentParser()
    add_model_args(parser)
    args = parser.parse_args([])
    for field in ("device", "dtype", "strategy", "attn"):
        assert getattr(args, field) == getattr(EngineConfig, field), field
    assert args.max_row_tokens is None  # None = the engine's default, named in the help
    assert f"default {EngineConfig.max_row_tokens}" in _help(parser, "max_row_tokens")
    choices = {a.dest: a.choices for a in parser._actions}
    assert set(choices["strategy"]) == {"auto", *STRATEGIES} and set(choices["attn"]) == set(ATTN_CHOICES)
    assert args.state_cache_mb is None and f"default {EngineConfig.state_cache_mb}" in _help(parser, "state_cache_mb")
    assert args.prompt_version is None and EngineConfig.prompt_version in _help(parser, "prompt_version")


def test_the_accelerator_batching_is_the_scheduler_default():
    assert ACCELERATOR_BATCHING == (SchedulerConfig.max_num_batched_tokens, SchedulerConfig.max_batch_requests)
    assert CPU_BATCHING == (4096, 16)


# -- the signatures read their defaults from the configs ------------------------------------------


def test_create_app_and_the_scheduler_default_to_the_configs():
    from logitjudge.engine.scheduler import Scheduler
    from logitjudge.server.app import create_app

    app = _defaults(create_app)
    for field in (
        "api_keys",
        "max_queue",
        "max_body_bytes",
        "drain_timeout",
        "max_questions",
        "max_items",
        "max_text_chars",
        "strict_wire",
    ):
        assert app[field] == getattr(ServerConfig, field), field
    assert app["max_num_batched_tokens"] is None and app["max_batch_requests"] is None  # default_batching
    assert app["max_concurrent_batches"] is None  # default_concurrency: the backend decides
    sched = _defaults(Scheduler.__init__)
    for f in dataclasses.fields(SchedulerConfig):
        assert sched[f.name] == f.default == getattr(ServerConfig, f.name), f.name
    assert (ServerConfig.max_questions, ServerConfig.max_items, ServerConfig.max_text_chars) == (
        RequestLimits.max_questions,
        RequestLimits.max_items,
        RequestLimits.max_text_chars,
    )


def test_the_engine_signatures_default_to_the_engine_config():
    from logitjudge.engine.model import load_model
    from logitjudge.engine.runner import Runner
    from logitjudge.judge import Judge

    runner = _defaults(Runner.__init__)
    assert runner["max_row_tokens"] == EngineConfig.max_row_tokens
    assert runner["dense_mask_max_tokens"] == EngineConfig.dense_mask_max_tokens
    assert _defaults(load_model) == {"device": EngineConfig.device, "dtype": EngineConfig.dtype}
    # Judge.load: every engine argument is None = "the config's"; the config is EngineConfig()
    load = _defaults(Judge.load.__func__)
    engine_args = {f.name for f in dataclasses.fields(EngineConfig)} - {"dense_mask_max_tokens"}  # via config=
    engine_args |= {"config"}
    assert engine_args <= set(load) and all(load[name] is None for name in engine_args)


def test_engine_defaults_are_written_only_in_the_configs():
    """The default numbers appear as code only in the two config modules."""
    literals = re.compile(r"\b(8192|8_192|16_384|16384|32_768|32768|65_536|65536)\b|16 \* 1024 \* 1024")
    allowed = {PACKAGE / "engine" / "config.py", PACKAGE / "server" / "config.py", PACKAGE / "server" / "metrics.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:  # metrics.py: Prometheus bucket bounds, not defaults
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if literals.search(code) and not code.strip().startswith(('"', "'")):
                found.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert found == []


def test_max_choice_options_is_defined_once():
    from logitjudge.contract import systemone as schemas
    from logitjudge.engine import question_types, types

    definitions = [
        f"{path.relative_to(PACKAGE)}: {m.group(0)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for m in re.finditer(r"^(MAX_CHOICE_OPTIONS|MAX_SCORE_LEVELS)\s*=.*$", path.read_text(encoding="utf-8"), re.M)
    ]
    assert definitions == ["engine/types.py: MAX_CHOICE_OPTIONS = 255", "engine/types.py: MAX_SCORE_LEVELS = 10"]
    assert schemas.MAX_CHOICE_OPTIONS == question_types.CHOICE.max_options == types.MAX_CHOICE_OPTIONS
    assert schemas.MAX_SCORE_LEVELS == question_types.SCORE.max_options == types.MAX_SCORE_LEVELS


# -- strict configs ------------------------------------------------------------------------------


def test_configs_refuse_what_they_cannot_run():
    refused = {
        ("strategy",): "unknown strategy 'pakced'",
        ("attn",): "unknown attention 'flash'",
        ("backend",): "unknown backend 'llamacpp'",
        ("prompt_version",): "unknown prompt version 'lj-prompt-9'",
        ("dtype",): "unknown dtype 'half'",
    }
    for field, message in refused.items():
        with pytest.raises(ConfigurationError, match=message) as raised:
            EngineConfig(**{field[0]: message.split("'")[1]})
        # the operator's configuration, not a request's: the server's table does not answer it 4xx
        assert raised.value.field == field and not isinstance(raised.value, RequestError)
        assert raised.value.error_type == "configuration_error"
    # mixed precision where it cannot run: refused with the configuration, before any weights load
    for options, message in (({"strategy": "packed"}, "strategy packed"), ({"backend": "vllm"}, "vLLM serves")):
        with pytest.raises(ConfigurationError, match=message) as raised:
            EngineConfig(dtype="mixed", **options)
        assert raised.value.field == ("dtype",)
    assert EngineConfig(dtype="bf16").dtype == "bf16"  # the short names stay accepted
    with pytest.raises(ConfigurationError, match="unknown vLLM executor 'slurm'") as raised:
        VllmConfig(distributed_executor_backend="slurm")
    assert raised.value.field == ("vllm", "distributed_executor_backend")
    for field in ("max_state_tokens", "max_request_tokens", "max_row_tokens", "dense_mask_max_tokens"):
        with pytest.raises(ValueError, match=field):
            EngineConfig(**{field: 0})
    with pytest.raises(ValueError, match="state_cache_mb"):
        EngineConfig(state_cache_mb=-1)
    with pytest.raises(TypeError):
        EngineConfig().with_options(max_rows_tokens=10)  # a typo fails loudly
    assert EngineConfig().with_options(strategy=None, max_row_tokens=None) == EngineConfig()  # None keeps
    with pytest.raises(ValueError, match="max_queue"):
        SchedulerConfig(max_queue=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        ServerConfig(max_num_batched_tokens=0)  # the scheduler's rule, inherited
    with pytest.raises(ValueError, match="max_body_bytes"):
        ServerConfig(max_body_bytes=10)


def test_an_unknown_strategy_is_refused_before_the_model_loads(monkeypatch):
    from logitjudge.engine import core

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(core, "load_model", no_load)
    with pytest.raises(ConfigurationError, match="unknown strategy"):
        core.Engine.load(None, strategy="pakced")
    from logitjudge.judge import Judge

    with pytest.raises(ConfigurationError, match="unknown backend 'llamacpp'"):
        Judge.load(None, backend="llamacpp")


# -- the row budget's new name, and the old one -------------------------------------------------


def test_max_num_batched_tokens_is_not_an_engine_option():
    with pytest.raises(TypeError, match="max_num_batched_tokens"):
        EngineConfig().with_options(max_num_batched_tokens=1234)  # the scheduler's name, never the row budget's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert EngineConfig().with_options(max_row_tokens=7).max_row_tokens == 7


def test_judge_load_hands_max_row_tokens_to_the_engine_config(monkeypatch):
    from support.scripted import ScriptedEngine

    from logitjudge.engine import core
    from logitjudge.judge import Judge

    seen = []

    def fake_load(cls, model=None, config=None, **options):
        seen.append((model, config, options))
        return ScriptedEngine()

    monkeypatch.setattr(core.Engine, "load", classmethod(fake_load))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Judge.load("m", max_row_tokens=2048, device="cpu")
        Judge.load("m", config=EngineConfig(max_row_tokens=2048, device="cpu"))
    configs = [c for _, c, _ in seen]
    assert configs[0] == configs[1] == EngineConfig(max_row_tokens=2048, device="cpu")
    assert all(options == {} for _, _, options in seen)
    with pytest.raises(TypeError, match="max_num_batched_tokens"):
        Judge.load("m", max_num_batched_tokens=2048)  # type: ignore[call-arg]


def test_the_engine_row_budget_reaches_the_runner_and_describe(make_tiny):
    engine = make_tiny("llama", max_row_tokens=1024)
    info = engine.describe()
    assert engine.runner.max_row_tokens == 1024 == info["max_row_tokens"] == engine.config.max_row_tokens
    assert set(info) == {
        "model",
        "backend",
        "source",
        "device",
        "dtype",
        "precision",
        "state_dtype",
        "cpu_native_bf16",
        "strategy",
        "attn",
        "dense_mask_max_tokens",
        "state_cache_mb",
        "prompt_version",
        "fingerprint",
        "calibration",
        "calibration_origin",
        "heads",
        "head_evaluators",
        "adapters",
        "adapter_evaluators",
        "max_state_tokens",
        "max_request_tokens",
        "max_row_tokens",
    }
    default = make_tiny("llama")
    assert default.describe()["max_row_tokens"] == EngineConfig.max_row_tokens
    assert default.describe()["max_request_tokens"] == EngineConfig.max_request_tokens
    assert default.describe()["max_state_tokens"] == min(EngineConfig.max_state_tokens, 4096)  # the model's context


def test_the_prompt_versions_are_the_templates():
    from logitjudge.engine.config import PROMPT_VERSIONS
    from logitjudge.engine.prompt import PROMPT_VERSION, TEMPLATES

    assert tuple(TEMPLATES) == PROMPT_VERSIONS and PROMPT_VERSION == EngineConfig.prompt_version
