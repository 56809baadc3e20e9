"""The ``logitjudge`` command line.

::

    logitjudge ask REQUEST.json [--model PATH_OR_ID]      # one POST /v1/systemone body -> response JSON
    logitjudge serve [--model ...] [--port 8000]           # the HTTP server
    logitjudge evaluate DATA.jsonl --evaluators RAG ...    # dataset evaluation
    logitjudge calibrate LABELLED.jsonl --out calib.json   # fit calibration; --calibration on ask/evaluate/serve
    logitjudge compare OURS.jsonl HOSTED.jsonl             # agreement of two result files of the same items

Errors are printed as ``{"detail": {"error_type", "message", "field"}}`` on stderr with exit
status 2 for a bad request and 1 for an engine failure.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from logitjudge.engine.config import ATTN_CHOICES, STRATEGIES, EngineConfig
from logitjudge.errors import LogitJudgeError, RequestError


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model-loading flags every subcommand shares (defaults: :class:`EngineConfig`'s)."""
    p.add_argument(
        "--model",
        default=None,
        help="local model dir, .gguf file or cached id (default: embedded SmolLM2-135M-Instruct)",
    )
    p.add_argument("--device", default=EngineConfig.device, help="auto, cpu, cuda, cuda:N (default %(default)s)")
    p.add_argument(
        "--dtype", default=EngineConfig.dtype, help="auto, float32, bfloat16, float16 (default %(default)s)"
    )
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
        type=int,
        default=None,
        help="most tokens in one packed forward row inside an engine call (the engine's max_row_tokens, "
        f"reported as max_batch_tokens; default {EngineConfig.max_row_tokens}); "
        "`serve --max-batch-tokens` is the scheduler's budget across requests",
    )
    p.add_argument(
        "--rotations",
        type=int,
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


def _fail(message: str, error_type: str = "invalid_request_error", status: int = 2) -> int:
    print(json.dumps({"detail": {"error_type": error_type, "message": message}}, ensure_ascii=False), file=sys.stderr)
    return status


def cmd_ask(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _fail(f"{args.request}: cannot read the request: {exc}")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return _fail(f"{args.request}: not JSON: {exc}")
    # Validate the body before loading the model: a bad request fails in a second, not after a load.
    from pydantic import ValidationError

    from logitjudge.judge import validation_error_to_request_error
    from logitjudge.server.schemas import SystemOneRequest

    try:
        SystemOneRequest.model_validate(body)
    except ValidationError as exc:
        print(error_json(validation_error_to_request_error(exc)), file=sys.stderr)
        return 2
    try:
        judge = load_judge(args)
        response = judge.ask(body)
    except RequestError as exc:
        print(error_json(exc), file=sys.stderr)
        return 2
    except LogitJudgeError as exc:
        print(error_json(exc), file=sys.stderr)
        return 1
    print(json.dumps(response, ensure_ascii=False, indent=2 if args.pretty else None, allow_nan=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logitjudge", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer one POST /v1/systemone body from a file (or - for stdin)")
    ask.add_argument("request", help="path to the request JSON, or - for stdin")
    ask.add_argument("--pretty", action="store_true", help="indent the JSON output")
    add_model_args(ask)
    ask.set_defaults(func=cmd_ask)

    _optional_subcommands(sub)
    return parser


def _optional_subcommands(sub: Any) -> None:
    """Subcommands that live beside their modules (server, rubrics, quality)."""
    try:
        from logitjudge.server.cli import add_serve_parser
    except ImportError:
        pass
    else:
        add_serve_parser(sub)
    try:
        from logitjudge.rubrics.cli import add_evaluate_parser
    except ImportError:
        pass
    else:
        add_evaluate_parser(sub)
    try:
        from logitjudge.rubrics.calibrate import add_calibrate_parser
        from logitjudge.rubrics.compare import add_compare_parser
    except ImportError:
        pass
    else:
        add_calibrate_parser(sub)
        add_compare_parser(sub)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
