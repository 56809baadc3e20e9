"""What every subcommand shares: the model flags, the one model loader, the error output.

Errors are printed as ``{"detail": {"error_type", "message", "field"}}`` on stderr with exit
status 2 for a bad request and 1 for an engine failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from logitjudge.cli.config_args import add_config_argument, config_values, plain
from logitjudge.cli.status import load_status
from logitjudge.engine.config import (
    ATTN_CHOICES,
    BACKENDS,
    DISTRIBUTED_EXECUTORS,
    DTYPE_CHOICES,
    PROMPT_VERSIONS,
    STRATEGIES,
    SYSTEMONE_ROTATIONS,
    EngineConfig,
    VllmConfig,
)
from logitjudge.errors import InvalidRequestError, LogitJudgeError
from logitjudge.settings import enforce_offline

__all__ = [
    "plain",
    "add_model_args",
    "load_judge",
    "allow_downloads",
    "vllm_config",
    "error_json",
    "fail",
    "positive_int",
    "nonnegative_int",
    "float_between",
    "run_subcommand",
    "complain",
    "add_subcommand",
]


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


positive_int = _int_at_least(1)
"""An ``argparse`` type: an integer >= 1 (so ``--rotations 0`` is exit 2, not a silent run)."""

nonnegative_int = _int_at_least(0)
"""An ``argparse`` type: an integer >= 0 (``--state-cache-mb 0`` = off)."""


def float_between(low: float, high: float, unit: str = "") -> Callable[[str], float]:
    """An ``argparse`` type: a number strictly between ``low`` and ``high`` (``nan`` refused;
    ``high=inf`` for "more than ``low``"), ``unit`` named in the message."""
    what = f" {unit}" if unit else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number{what and ' of' + what}, got {text!r}") from None
        if not low < value < high:  # also refuses nan
            bound = f"more than {low:g}{what}" if high == float("inf") else f"strictly between {low:g} and {high:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def add_subcommand(subparsers: Any, name: str, summary: str, doc: str | None) -> argparse.ArgumentParser:
    """Add subcommand ``name`` to the main CLI's ``subparsers``: ``summary`` is its line in
    ``logitjudge --help``, the first paragraph of ``doc`` (its module's docstring) its
    description, as plain text."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=summary, description=plain(doc))
    return parser


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model-loading flags every subcommand shares (defaults: :class:`EngineConfig`'s)."""
    p.add_argument(
        "--model",
        default=None,
        help="a packaged model (smollm2-135m, qwen2.5-coder-1.5b), a local model directory, a .gguf file or an id "
        "in the local Hugging Face cache (default: LOGITJUDGE_MODEL, else qwen2.5-coder-1.5b)",
    )
    p.add_argument(
        "--allow-download",
        action="store_true",
        help="let a --model id missing here be fetched from the Hugging Face hub (also "
        "LOGITJUDGE_ALLOW_DOWNLOAD=1); without it nothing touches a network",
    )
    # The engine's and vLLM's flags: default and help from the config fields (cli.config_args).
    add_config_argument(p, EngineConfig, "device")
    add_config_argument(p, EngineConfig, "dtype", choices=DTYPE_CHOICES)
    add_config_argument(p, EngineConfig, "strategy", choices=("auto", *STRATEGIES))
    p.add_argument(
        "--calibration",
        default="shipped",
        metavar="shipped|none|FILE",
        help="shipped (default: the calibration shipped for this model, prompt version and dtype, if any), "
        "none, or a calibration file from `logitjudge calibrate` (refused if fitted for another model)",
    )
    p.add_argument(
        "--heads",
        default="shipped",
        metavar="shipped|none|DIR[,DIR]",
        help="trained heads for the evaluators that read one: shipped (default: the heads shipped for this "
        "model, if any), none, or folders from `logitjudge fit` (refused if trained for another model)",
    )
    p.add_argument(
        "--adapters",
        default="shipped",
        metavar="shipped|none|DIR[,DIR]",
        help="branch adapters: shipped (default: the adapters shipped for this model, if any), none, or activated "
        "LoRA folders in PEFT's format from `logitjudge fit --adapter` or PEFT, with shipped among them to keep "
        "those too (refused: plain LoRA, or trained for another model); an evaluator an adapter was trained on "
        "is answered by it, and questions may name one with x_adapter",
    )
    add_config_argument(p, EngineConfig, "attn", choices=ATTN_CHOICES)
    add_config_argument(
        p,
        EngineConfig,
        "max_row_tokens",
        flag="--engine-row-tokens",
        default=None,
        type=positive_int,
        help_suffix=f"(default {EngineConfig.max_row_tokens}; `serve --max-num-batched-tokens` is the "
        "scheduler's budget across requests)",
    )
    add_config_argument(
        p,
        EngineConfig,
        "prompt_version",
        default=None,
        choices=PROMPT_VERSIONS,
        help_suffix=f"(default {EngineConfig.prompt_version})",
    )
    add_config_argument(
        p,
        EngineConfig,
        "state_cache_mb",
        default=None,
        type=nonnegative_int,
        help_suffix=f"(default {EngineConfig.state_cache_mb})",
    )
    p.add_argument(
        "--rotations",
        type=positive_int,
        default=None,
        help="option-order rotations for choice/score questions when a request has no x_rotations, on both APIs "
        f"(1 = a single order; default: every cyclic rotation of up to {SYSTEMONE_ROTATIONS} options for "
        "System One questions, 1 for the evaluators')",
    )
    add_config_argument(p, EngineConfig, "backend", choices=BACKENDS)
    v = p.add_argument_group("vLLM backend (with --backend vllm; passed to vLLM's engine)")
    for field in dataclasses.fields(VllmConfig):
        if field.name == "distributed_executor_backend":
            add_config_argument(v, VllmConfig, field.name, choices=DISTRIBUTED_EXECUTORS)
        elif field.type in ("int", "int | None"):
            add_config_argument(v, VllmConfig, field.name, type=positive_int)
        else:
            add_config_argument(v, VllmConfig, field.name)
    p.add_argument(
        "--judge-factory",
        default=None,
        metavar="MODULE:CALLABLE",
        help="build the judge with this callable (no arguments) instead of loading --model; "
        "the other model flags are then unused (custom engines, tests)",
    )


def load_failure(exc: LogitJudgeError) -> str:
    """What a failed :func:`load_judge` failed at: ``cannot load the adapters`` for an
    :class:`~logitjudge.errors.AdapterError`, else ``cannot load the model``."""
    from logitjudge.errors import AdapterError

    return "cannot load the adapters" if isinstance(exc, AdapterError) else "cannot load the model"


def load_judge(args: argparse.Namespace) -> Any:
    """A :class:`~logitjudge.Judge` from the shared model flags (:func:`add_model_args`).

    This is the one loader of every subcommand (``ask``, ``serve``, ``evaluate``, ``calibrate``): each flag
    reaches :meth:`Judge.load <logitjudge.judge.Judge.load>`. With ``--judge-factory MODULE:CALLABLE``
    the judge is ``CALLABLE()`` instead (default callable name ``make_judge``).

    Raises:
        LogitJudgeError: the model cannot be loaded, or the factory cannot be imported or called.
    """
    factory = getattr(args, "judge_factory", None)
    if factory:
        module, _, attr = factory.partition(":")
        try:
            make = getattr(importlib.import_module(module), attr or "make_judge")
        except (ImportError, AttributeError) as exc:
            raise LogitJudgeError(f"--judge-factory {factory!r}: {exc}") from None
        return make()
    allow_downloads(args)
    from logitjudge.judge import Judge

    rotations = {} if args.rotations is None else {"default_rotations": args.rotations}
    try:
        vllm = vllm_config(args)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), field=("vllm",)) from None
    with load_status(not getattr(args, "quiet_load", False)) as shown:
        t0 = time.monotonic()
        judge = _load(Judge, args, vllm, rotations)
        if shown is not None:
            about = judge.describe() if hasattr(judge, "describe") else {}
            shown.line(
                f"ready: {about.get('model', judge.model_name)} ({about.get('precision', about.get('dtype', '?'))}, "
                f"{about.get('device', '?')}), loaded and self-checked in {time.monotonic() - t0:.1f} s"
            )
    return judge


def allow_downloads(args: argparse.Namespace) -> None:
    """``--allow-download`` -> ``LOGITJUDGE_ALLOW_DOWNLOAD=1``; then the hub libraries' offline
    switches unless downloads are allowed (:func:`logitjudge.settings.enforce_offline`)."""
    if getattr(args, "allow_download", False):
        os.environ["LOGITJUDGE_ALLOW_DOWNLOAD"] = "1"
    enforce_offline()


def _load(judge_cls: Any, args: argparse.Namespace, vllm: VllmConfig, rotations: dict[str, int]) -> Any:
    return judge_cls.load(
        args.model,
        device=args.device,
        dtype=args.dtype,
        strategy=args.strategy,
        attn=args.attn,
        max_row_tokens=args.max_row_tokens,
        state_cache_mb=args.state_cache_mb,
        prompt_version=args.prompt_version,
        calibration=args.calibration,
        backend=args.backend,
        vllm=vllm,
        heads=getattr(args, "heads", "shipped"),
        adapters=getattr(args, "adapters", "shipped"),
        **rotations,
    )


def vllm_config(args: argparse.Namespace) -> VllmConfig:
    """The :class:`VllmConfig` of the vLLM flags (:func:`add_model_args`).

    Raises:
        ValueError: a value out of range (the message names the option).
    """
    return VllmConfig(**config_values(args, VllmConfig))


def run_subcommand(args: argparse.Namespace) -> int:
    """Run the parsed subcommand (``args.func``) and return its exit status; Ctrl-C prints one
    line (for ``evaluate``: where the rows are kept and how to resume) instead of a traceback
    and returns 130 (128 + SIGINT, as shells report it)."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        said = "interrupted"
        if args.command == "evaluate":
            said += f"; the rows written are kept in {args.out}: run the same command again to resume"
        return complain(args.command, said, 130)


def error_json(exc: LogitJudgeError) -> str:
    return json.dumps(
        {"detail": {"error_type": exc.error_type, "message": exc.message, "field": list(exc.field)}},
        ensure_ascii=False,
    )


def complain(command: str, message: str, status: int = 2) -> int:
    """Print ``logitjudge COMMAND: message`` on stderr (one plain line, as argparse's own errors)
    and return ``status`` (the caller's exit status)."""
    print(f"logitjudge {command}: {message}", file=sys.stderr)
    return status


def fail(message: str, error_type: str = "invalid_request_error", status: int = 2) -> int:
    print(json.dumps({"detail": {"error_type": error_type, "message": message}}, ensure_ascii=False), file=sys.stderr)
    return status
