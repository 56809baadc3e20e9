"""What every subcommand shares: the model flags, the one model loader, the error output.

Errors are printed as ``{"detail": {"error_type", "message", "field"}}`` on stderr with exit
status 2 for a bad request and 1 for an engine failure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

from logitjudge.engine.config import ATTN_CHOICES, STRATEGIES, EngineConfig
from logitjudge.errors import LogitJudgeError

__all__ = ["add_model_args", "load_judge", "error_json", "fail", "positive_int"]


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1 (so ``--rotations 0`` is exit 2, not a silent run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model-loading flags every subcommand shares (defaults: :class:`EngineConfig`'s)."""
    p.add_argument(
        "--model",
        default=None,
        help="smollm2-135m (embedded), qwen2.5-coder-1.5b (extra qwen15b), a local model dir, .gguf file "
        "or cached id (default: LOGITJUDGE_MODEL, else qwen2.5-coder-1.5b)",
    )
    p.add_argument("--device", default=EngineConfig.device, help="auto, cpu, cuda, cuda:N (default %(default)s)")
    p.add_argument("--dtype", default=EngineConfig.dtype, help="auto, float32, bfloat16, float16 (default %(default)s)")
    p.add_argument(
        "--strategy", default=EngineConfig.strategy, help=f"auto, {', '.join(STRATEGIES)} (default %(default)s)"
    )
    p.add_argument(
        "--calibration",
        default=None,
        metavar="CALIB.json",
        help="apply a calibration file from `logitjudge calibrate` (refused if fitted for another model)",
    )
    p.add_argument(
        "--attn",
        default=EngineConfig.attn,
        help=f"{', '.join(ATTN_CHOICES)} (default %(default)s: flex on CUDA where the model supports it)",
    )
    p.add_argument(
        "--engine-row-tokens",
        type=positive_int,
        default=None,
        help="most tokens in one packed forward row inside an engine call (the engine's max_row_tokens, "
        f"reported as max_batch_tokens; default {EngineConfig.max_row_tokens}); "
        "`serve --max-batch-tokens` is the scheduler's budget across requests",
    )
    p.add_argument(
        "--rotations",
        type=positive_int,
        default=None,
        help="option-order rotations for choice/score questions when a request has no x_rotations (default 1 = off)",
    )
    p.add_argument(
        "--judge-factory",
        default=None,
        metavar="MODULE:CALLABLE",
        help="build the judge with this callable (no arguments) instead of loading --model; "
        "the other model flags are then unused (custom engines, tests)",
    )


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
    from logitjudge.judge import Judge

    rotations = {} if args.rotations is None else {"default_rotations": args.rotations}
    return Judge.load(
        args.model,
        device=args.device,
        dtype=args.dtype,
        strategy=args.strategy,
        attn=args.attn,
        max_row_tokens=args.engine_row_tokens,
        calibration=args.calibration,
        **rotations,
    )


def error_json(exc: LogitJudgeError) -> str:
    return json.dumps(
        {"detail": {"error_type": exc.error_type, "message": exc.message, "field": list(exc.field)}},
        ensure_ascii=False,
    )


def fail(message: str, error_type: str = "invalid_request_error", status: int = 2) -> int:
    print(json.dumps({"detail": {"error_type": error_type, "message": message}}, ensure_ascii=False), file=sys.stderr)
    return status
